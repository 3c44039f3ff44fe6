"""Reading user-supplied text files with one-line, named errors."""

from __future__ import annotations

from pathlib import Path


def read_utf8(path: str | Path, what: str, error: type[Exception]) -> str:
    """The text of ``path``; a missing, unreadable or non-UTF-8 file raises ``error`` naming ``what``."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None

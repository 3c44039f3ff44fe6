"""The aider benchmark's parts that need no aider: the recording proxy, the metadata file, the report."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from benchmarks import aider


class _Upstream(BaseHTTPRequestHandler):
    """A fake OpenAI server: a streamed chat answer in two chunks 0.5 s apart, or a plain JSON answer."""

    def log_message(self, *args) -> None:
        return None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, piece in enumerate(("Hello", " world")):
                if i:
                    time.sleep(0.5)
                doc = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            return
        out = json.dumps({"choices": [{"index": 0, "message": {"content": "whole"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_recorder_passes_bytes_and_times_the_first_content(upstream):
    rec = aider.Recorder(upstream)
    try:
        with httpx.Client(timeout=10) as c:
            r = c.post(rec.url + "/v1/chat/completions", json={"stream": True, "temperature": 0})
            assert r.status_code == 200 and b'"Hello"' in r.content and r.content.endswith(b"[DONE]\n\n")
            r2 = c.post(rec.url + "/v1/chat/completions", json={"max_tokens": 5})
            assert r2.json()["choices"][0]["message"]["content"] == "whole"
    finally:
        rec.close()
    streamed, whole = rec.exchanges
    assert streamed.content == "Hello world" and streamed.temperature == 0 and streamed.status == 200
    # the first chunk is seen as it passes, not when the answer ends (0.5 s later; slack for a busy machine)
    assert streamed.sent <= streamed.first and streamed.end - streamed.first >= 0.3
    assert whole.content == "whole" and whole.max_tokens == 5 and whole.first == whole.end


def test_metadata_names_the_model_as_aider_spells_it():
    meta = aider.aider_metadata(16384)
    assert list(meta) == [f"openai/{aider.SERVED_NAME}"]
    assert meta[f"openai/{aider.SERVED_NAME}"]["max_input_tokens"] == 16384
    cmd = aider.aider_command("aider", "http://x/v1", Path("/abs/meta.json"), "f.py")
    assert cmd[cmd.index("--model-metadata-file") + 1] == "/abs/meta.json"
    assert cmd[cmd.index("--edit-format") + 1] == "whole" and cmd[-1] == "f.py"


def _run(server: str, file: str, repeat: int, wall: float, sha: str = "a") -> aider.Run:
    return aider.Run(server, file, repeat, wall, 0, 1, 1.0, 10.0, 100, True, sha, False)


def test_report_ratios_and_identity():
    runs = [_run("fucina", "a.py", r, w) for r, w in enumerate((10.0, 12.0, 11.0))]
    runs += [_run("fucina-plain", "a.py", r, 22.0) for r in range(3)]
    runs += [_run("llama-server", "a.py", r, 33.0, sha="b") for r in range(3)]
    text = "\n".join(aider._table(runs, ["fucina", "fucina-plain", "llama-server"], ["a.py"]))
    assert "| a.py | fucina | 11.0 |" in text and "| 3/3 | 3/3 | 0/3 | 1.00x |" in text
    assert "| a.py | fucina-plain | 22.0 |" in text and "2.00x |" in text
    assert "| a.py | llama-server | 33.0 |" in text and "| 0/3 | 3/3 | 0/3 | 3.00x |" in text  # other text
    assert "- `fucina-plain`: 2.00x" in text and "- `llama-server`: 3.00x" in text

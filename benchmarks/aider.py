"""Agents end to end: aider's whole-file edit through ``fucina serve`` and through llama.cpp's server.

``python -m benchmarks.aider --aider PATH --model qwen2.5-coder-1.5b --llama-server BIN --out DIR``

What a user of aider waits for: the whole ``aider --message "..." FILE`` command, wall time, and the
time to first token of its request, on a few Python files of different sizes (by default three
standard-library modules, read from this Python's ``Lib/``: ``tty``, ``secrets``, ``signal``; their
sha256 are in the results). They were picked because Qwen2.5-Coder 1.5B does the edit on them: on
``colorsys`` and ``nturl2path`` it asks for the file it was given, and on ``bisect`` aider's history
summarizer adds requests after the edit. aider is not a dependency of fucina: install it in its own environment
(``python -m venv V && V/bin/pip install aider-chat``) and pass ``--aider V/bin/aider``.

Each run starts a fresh server (``--servers``: ``fucina`` = ``fucina serve``, ``fucina-plain`` =
``fucina serve --no-spec``, ``llama-server`` = llama.cpp's plain server, ``ngram-mod`` etc. its draftless
modes at their defaults; the same GGUF, context and threads, see :func:`benchmarks.http.server_command`),
copies the file into an empty directory and runs aider there with the settings the README's recipe gives
(``--edit-format whole``, a model metadata file with the context, no git, no lint). Servers are
interleaved per file and repeat, and nothing else runs. Between aider and the server sits a small
recording proxy (:class:`Recorder`): it forwards bytes unchanged and notes when each request arrived,
when its first content arrived and when it ended — so TTFT is measured the same way for every server.

The report (``results.md`` / ``results.json``): per file and server the median wall time, TTFT and decode
speed, the number of model requests aider made, whether the edited file equals ``fucina-plain``'s (at
the exact level ``fucina`` must: the run fails loudly if it does not) and compiles; then each server's
wall time against ``fucina``'s.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from benchmarks.http import SERVERS, Server, decode_rate

#: What aider is asked to do to every file (the request the issue about agents timed).
INSTRUCTION = "Add type hints to every function and method."
#: Standard-library modules edited by default: 36, 72 and 92 lines on Python 3.11.
DEFAULT_MODULES = ("tty", "secrets", "signal")
#: The name every server answers to, so aider's settings are the same for all of them.
SERVED_NAME = "local"


@dataclass
class Exchange:
    """One request aider sent, as the proxy saw it (times from ``time.perf_counter``)."""

    path: str
    sent: float
    first: float | None = None
    end: float | None = None
    status: int = 0
    content: str = ""
    temperature: float | None = None
    max_tokens: int | None = None


def _content_of(doc: dict) -> str:
    """The text one response document (or one streamed chunk) carries."""
    out = []
    for ch in doc.get("choices") or []:
        for part in (ch.get("delta") or {}, ch.get("message") or {}):
            if isinstance(part.get("content"), str):
                out.append(part["content"])
        if isinstance(ch.get("text"), str):
            out.append(ch["text"])
    return "".join(out)


class Recorder:
    """A loopback HTTP proxy in front of ``upstream`` that records every exchange (:class:`Exchange`).

    Bytes pass unchanged (HTTP/1.0 to the client: the body ends when the connection closes, so a streamed
    answer is forwarded chunk by chunk as it arrives)."""

    def __init__(self, upstream: str) -> None:
        self.exchanges: list[Exchange] = []
        up = urlsplit(upstream)
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:  # quiet
                return None

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ex = Exchange(self.path, time.perf_counter())
                try:
                    req = json.loads(body) if body else {}
                    ex.temperature, ex.max_tokens = req.get("temperature"), req.get("max_tokens")
                except ValueError:
                    pass
                recorder.exchanges.append(ex)
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=3600)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "accept-encoding", "content-length")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                ex.status = resp.status
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.end_headers()
                pending, parts, whole = b"", [], []
                streamed = "text/event-stream" in (resp.getheader("Content-Type") or "")
                while chunk := resp.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if not streamed:
                        whole.append(chunk)
                        continue
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                            text = _content_of(json.loads(line[6:]))
                            if text:
                                ex.first = ex.first if ex.first is not None else time.perf_counter()
                                parts.append(text)
                ex.end = time.perf_counter()
                if whole:
                    try:
                        parts = [_content_of(json.loads(b"".join(whole)))]
                    except ValueError:
                        parts = []
                    ex.first = ex.end
                ex.content = "".join(parts)
                conn.close()

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Run:
    """One aider command against one server."""

    server: str
    file: str
    repeat: int
    wall: float
    returncode: int
    requests: int
    ttft: float
    decode_tps: float
    tokens: int
    compiles: bool
    output_sha: str
    #: aider warned "Unknown context window size" (its metadata file was not taken).
    context_warning: bool
    temperatures: list = field(default_factory=list)


def default_files() -> list[Path]:
    return [Path(importlib.util.find_spec(m).origin) for m in DEFAULT_MODULES]


def aider_command(aider: str, api_base: str, metadata: Path, file_name: str) -> list[str]:
    """The aider command a run executes: the README's recipe, one message, then exit."""
    return [aider, "--model", f"openai/{SERVED_NAME}", "--openai-api-base", api_base, "--openai-api-key", "unused",
            "--model-metadata-file", str(metadata), "--edit-format", "whole", "--no-git", "--no-auto-lint",
            "--yes-always", "--no-check-update", "--analytics-disable", "--no-show-release-notes", "--no-pretty",
            "--no-fancy-input", "--map-tokens", "0", "--no-detect-urls", "--no-suggest-shell-commands",
            "--message", INSTRUCTION, file_name]


def aider_metadata(ctx: int) -> dict:
    """aider's ``--model-metadata-file`` for the served model: its context (no "Unknown context window size")."""
    return {f"openai/{SERVED_NAME}": {"max_input_tokens": ctx, "max_tokens": ctx, "max_output_tokens": ctx,
                                      "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                                      "litellm_provider": "openai", "mode": "chat"}}


def _compiles(text: str) -> bool:
    try:
        compile(text, "<edited>", "exec")
        return True
    except SyntaxError:
        return False


def one_run(kind: str, *, aider: str, src: Path, repeat: int, model: str, model_path: Path, ctx: int,
            threads: int, llama_server: str | None, work: Path, count_tokens) -> Run:
    """Start a fresh ``kind`` server, run aider once on a copy of ``src``, stop the server."""
    import httpx

    server = Server(kind, model, model_path, ctx, threads, llama_server, work, served_name=SERVED_NAME)
    recorder = None
    try:
        server.wait_ready(httpx)
        recorder = Recorder(server.url)
        run_dir = Path(tempfile.mkdtemp(prefix=f"{kind}-{src.stem}-", dir=work))
        shutil.copy(src, run_dir / src.name)
        metadata = run_dir.parent / "aider-metadata.json"
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", AIDER_ANALYTICS="false")
        t0 = time.perf_counter()
        done = subprocess.run(aider_command(aider, recorder.url + "/v1", metadata, src.name), cwd=run_dir,
                              env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t0
        said = done.stdout + done.stderr
        (run_dir / "aider.out").write_text(said)
    finally:
        if recorder is not None:
            recorder.close()
        server.stop()
    chats = [e for e in recorder.exchanges if e.path.endswith("/chat/completions")]
    first = chats[0] if chats else None
    ttft = (first.first - first.sent) if first and first.first is not None else wall
    tokens = count_tokens(first.content) if first else 0
    span = (first.end - first.first) if first and first.first is not None and first.end else 0.0
    edited = (run_dir / src.name).read_text(encoding="utf-8")
    return Run(kind, src.name, repeat, wall, done.returncode, len(chats), ttft, decode_rate(tokens, span), tokens,
               _compiles(edited),
               hashlib.sha256(edited.encode()).hexdigest()[:16], "Unknown context window size" in said,
               [e.temperature for e in chats])


def _plain_files(runs: Sequence[Run]) -> dict[tuple[str, int], str]:
    """``(file, repeat) -> sha`` of the file ``fucina-plain`` wrote: what every other edit is compared with."""
    return {(r.file, r.repeat): r.output_sha for r in runs if r.server == "fucina-plain"}


def _table(runs: Sequence[Run], servers: Sequence[str], files: Sequence[str]) -> list[str]:
    base = "fucina" if "fucina" in servers else servers[0]
    plain = _plain_files(runs)
    lines = ["| file | server | wall (s) | TTFT (s) | decode tok/s | requests | same file as fucina-plain | compiles | "
             f"context warning | wall / {base}'s |", "|---|---|---:|---:|---:|---:|---|---|---|---:|"]
    cells = {(f, s): rs for f in files for s in servers if (rs := [r for r in runs if r.file == f and r.server == s])}
    walls = {key: statistics.median(r.wall for r in rs) for key, rs in cells.items()}
    for (f, s), rs in cells.items():
        same = [plain[r.file, r.repeat] == r.output_sha for r in rs if (r.file, r.repeat) in plain]
        ratio = walls[f, s] / walls[f, base] if (f, base) in walls else float("nan")
        lines.append(f"| {f} | {s} | {walls[f, s]:.1f} | {statistics.median(r.ttft for r in rs):.1f} | "
                     f"{statistics.median(r.decode_tps for r in rs):.1f} | "
                     f"{'/'.join(str(r.requests) for r in rs)} | "
                     f"{f'{sum(same)}/{len(same)}' if same else '-'} | {sum(r.compiles for r in rs)}/{len(rs)} | "
                     f"{sum(r.context_warning for r in rs)}/{len(rs)} | {ratio:.2f}x |")
    lines += ["", f"Wall time against `{base}` (median over files of the per-file medians; above 1 = slower than {base}):",
              ""]
    for s in servers:
        ratios = [walls[f, s] / walls[f, base] for f in files if (f, s) in walls and (f, base) in walls]
        if ratios and s != base:
            lines.append(f"- `{s}`: {statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.aider", description=__doc__.splitlines()[0])
    ap.add_argument("--aider", required=True, help="the aider executable (its own virtual environment)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--servers", default="fucina,fucina-plain,llama-server",
                    help="comma list of " + ",".join(s for s in SERVERS if s not in ("api", "lcp", "lcp-pld")))
    ap.add_argument("--llama-server", help="path of the llama-server binary (scripts/build_llama_server.sh)")
    ap.add_argument("--files", type=Path, nargs="*", help="Python files to edit (default: " +
                    ", ".join(DEFAULT_MODULES) + " from the standard library)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=Path("bench-out/aider"))
    a = ap.parse_args(argv)
    servers = [s.strip() for s in a.servers.split(",") if s.strip()]
    bad = [s for s in servers if s not in SERVERS or s in ("api", "lcp", "lcp-pld")]
    if bad:
        ap.error(f"unknown or unsupported servers {bad}")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    if not shutil.which(a.aider):
        ap.error(f"--aider {a.aider}: not an executable")

    from fucina.calibrate import cpu_name
    from fucina.catalog import load_tokenizer, resolve_model

    files = [f.resolve() for f in a.files] if a.files else default_files()
    model_path = resolve_model(a.model)
    tok = load_tokenizer(a.model)
    a.out.mkdir(parents=True, exist_ok=True)
    # Runs live outside any git checkout (aider looks for one upward from its directory); every path it is
    # given is absolute, since it runs in the copy's directory.
    work = Path(tempfile.mkdtemp(prefix="aider-runs-")).resolve()
    print(f"runs, server logs and aider's output: {work}", file=sys.stderr)
    (work / "aider-metadata.json").write_text(json.dumps(aider_metadata(a.ctx), indent=1))
    runs: list[Run] = []
    for rep in range(a.repeats):
        for src in files:
            for kind in servers:  # interleaved: drift hits every server alike
                r = one_run(kind, aider=a.aider, src=src, repeat=rep, model=a.model, model_path=model_path,
                            ctx=a.ctx, threads=a.threads, llama_server=a.llama_server, work=work,
                            count_tokens=lambda t: len(tok.tokenize(t, add_bos=False)))
                runs.append(r)
                print(f"{rep + 1}/{a.repeats} {src.name} {kind}: {r.wall:.1f} s, ttft {r.ttft:.1f} s, "
                      f"{r.decode_tps:.1f} tok/s, {r.requests} requests, rc {r.returncode}", file=sys.stderr)
    meta = {"model": a.model, "date": time.strftime("%Y-%m-%d"), "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
            "command": "python -m benchmarks.aider " + " ".join(sys.argv[1:] if argv is None else argv),
            "aider": subprocess.run([a.aider, "--version"], capture_output=True, text=True).stdout.strip(),
            "files": {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files},
            "instruction": INSTRUCTION, "ctx": a.ctx, "threads": a.threads,
            "fucina_engine": os.environ.get("FUCINA_ENGINE", "auto")}
    names = [f.name for f in files]
    text = "\n".join([f"# aider end to end ({a.model}, {meta['date']})", "", f"Machine: {meta['machine']}",
                      f"Command: `{meta['command']}`", f"aider {meta['aider']}; instruction: \"{INSTRUCTION}\"", "",
                      *_table(runs, servers, names), ""])
    (a.out / "results.json").write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in runs]}, indent=1))
    (a.out / "results.md").write_text(text)
    print(text)
    plain = _plain_files(runs)
    differ = [r for r in runs if r.server == "fucina" and (r.file, r.repeat) in plain
              and plain[r.file, r.repeat] != r.output_sha]
    if differ:
        print(f"fucina's edit differs from fucina-plain's in {len(differ)} runs: not lossless", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

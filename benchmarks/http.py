"""Benchmarks through HTTP: ``fucina serve`` against the OpenAI-compatible servers users would pick instead.

``python -m benchmarks.http --tasks FILE [--traces FILE] --model smollm2-135m --out DIR``

Servers (``--servers``, each started here on 127.0.0.1 with the same GGUF, context and threads):

* ``api``: no server — the same request through ``fucina.LLM`` in this process, timed the same way
  (what HTTP costs is the ratio of ``fucina`` to it);
* ``fucina`` / ``fucina-plain``: ``fucina serve`` with and without speculation; ``fucina-xreq``: with
  speculation and its cross-request index (``--cross-request-tokens 65536``, one tenant: no API key),
  so it drafts from the requests it served before, as llama.cpp's ``ngram-mod`` does from its n-gram
  pool (shared across requests, kept until it fills);
* ``lcp`` / ``lcp-pld``: llama-cpp-python's server, plain and with its prompt-lookup draft
  (``--draft_model prompt-lookup-decoding``);
* ``llama-server`` / ``ngram-mod`` / ``ngram-simple`` / ``ngram-map-k``: llama.cpp's own server
  (``--spec-type none|ngram-mod|ngram-simple|ngram-map-k``, ``--spec-draft-n-max 16``) built from the
  llama.cpp vendored in the pinned llama-cpp-python sdist by ``scripts/build_llama_server.sh``; with
  flash attention off like the others (``FUCINA_BENCH_LLAMA_FA=auto`` restores llama-server's default).

Workloads, greedy, ``/v1/completions`` with a text prompt every server tokenizes the same way (the
model's chat template rendered by fucina, special tokens parsed, as all three servers do):

* **tasks**: each bench task's prompt, ``gen`` tokens, streamed; per request the client measures
  TTFT (request sent -> first text) and decode speed ((tokens - 1) / (last text - first text)).
  Servers are interleaved per repeat (every server runs a task before any runs it again), with a pause
  (``--settle``, 1 s) whenever the next request goes to another server: after a request llama.cpp's
  OpenMP threads spin on for a while, and on 2 cores they slowed whichever server was timed next
  (fucina, which followed ``ngram-simple``: 1.98x on code edits against 2.63x without llama.cpp's
  servers up, 2026-12-07). From the
  second repeat on, a server has served the same request before, which a server that remembers across
  requests (``ngram-mod``, ``fucina-xreq``) drafts from: the report keeps those **seen-before** requests
  apart from the **first-sight** ones. ``--fresh`` restarts every server before each repeat, so every
  request is a first sight (repeats then measure the cold case with the noise averaged).
* **sessions** (``--traces``): each agent trajectory replayed as one multi-turn session against our
  model (each request's recorded context as the prompt, ``--session-gen`` tokens): the TTFT of every
  turn (prefix reuse shows here) and the wall time of the whole session.

Reports medians per group and server in ``results.md`` / ``results.json``; run it alone on an idle
machine (every figure is a ratio measured in this one run). Each answer's sha256 is kept, and the report
counts the speculating servers' answers equal to their plain server's (same request, same repeat): a
fucina answer that differs is also said on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from fucina import cpu
from fucina.catalog import model_id

SERVERS = ("api", "fucina", "fucina-plain", "fucina-xreq", "lcp", "lcp-pld", "llama-server", "ngram-mod", "ngram-simple", "ngram-map-k")
LLAMA_SPEC = {"llama-server": "none", "ngram-mod": "ngram-mod", "ngram-simple": "ngram-simple",
              "ngram-map-k": "ngram-map-k"}


@dataclass(frozen=True)
class Sample:
    """One streamed request."""

    server: str
    workload: str  # "task" or "session"
    group: str
    item: str  # task id, or trajectory/step
    repeat: int
    prompt_chars: int
    tokens: int
    ttft: float
    decode_tps: float
    wall: float
    #: This server had served the same request before (a repeat after the first, without ``--fresh``).
    seen: bool = False
    #: sha256 of the streamed answer (its first 16 hex digits): what :func:`_answers` compares.
    text_sha: str = ""


#: Tokens of ``fucina-xreq``'s cross-request index (the server's ``--cross-request-tokens``).
XREQ_TOKENS = 65536


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcess:
    """The ``api`` pseudo-server: :class:`fucina.LLM` in this process, streamed like an HTTP request."""

    kind = "api"
    url = ""
    model_id = "api"
    cmd = ["fucina.LLM(model, n_ctx=ctx, n_threads=threads)"]

    def __init__(self, model: str, ctx: int, threads: int) -> None:
        from fucina.api import LLM

        self.llm = LLM(model, n_ctx=ctx, n_threads=threads, progress=False)

    def wait_ready(self, httpx) -> None:
        return None

    def stream(self, prompt: str, max_tokens: int) -> tuple[str, int, float, float, float]:
        t0 = time.perf_counter()
        first = last = None
        parts: list[str] = []
        tokens = 0
        for c in self.llm.complete(prompt, max_tokens=max_tokens, temperature=0, stream=True):
            if c.text:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                parts.append(c.text)
            if c.usage is not None:
                tokens = c.usage.completion_tokens
        wall = time.perf_counter() - t0
        ttft = (first - t0) if first is not None else wall
        span = (last - first) if first is not None and last is not None else 0.0
        return "".join(parts), tokens, ttft, decode_rate(tokens, span), wall

    def stop(self) -> None:
        self.llm.close()


def server_command(kind: str, model: str, model_path: Path, *, ctx: int, threads: int, port: int,
                   llama_server: str | None) -> list[str]:
    """The command line that starts a ``kind`` server on 127.0.0.1:``port``."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if kind.startswith("fucina"):
        cmd = [sys.executable, "-m", "fucina.cli", "serve", model, "--ctx", str(ctx), "--threads", str(threads),
               *host] + {"fucina-plain": ["--no-spec"],
                         "fucina-xreq": ["--cross-request-tokens", str(XREQ_TOKENS)]}.get(kind, [])
    elif kind.startswith("lcp"):
        if cpu.cpu_has_amx():  # llama_cpp.server has no switch for extra buffer types
            raise SystemExit(f"{kind}: llama_cpp.server loads with extra buffer types and {cpu.AMX_REASON}")
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--n_ctx", str(ctx),
               "--n_threads", str(threads), "--n_threads_batch", str(threads), "--model_alias", "m", *host]
        if kind == "lcp-pld":
            cmd += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "10"]
    else:
        if not llama_server:
            raise SystemExit(f"{kind} needs --llama-server (scripts/build_llama_server.sh prints its path)")
        cmd = [llama_server, "-m", str(model_path), "-c", str(ctx), "-t", str(threads), "-tb", str(threads),
               "--no-webui", "-np", "1", "--spec-type", LLAMA_SPEC[kind], *host]
        # Flash attention off, as fucina and llama-cpp-python run (llama-server's default is auto).
        cmd += ["-fa", os.environ.get("FUCINA_BENCH_LLAMA_FA", "off")]
        if kind != "llama-server":
            cmd += ["--spec-draft-n-max", "16"]
        if cpu.cpu_has_amx():  # the weights fucina's own servers load there: no extra buffer types
            cmd += ["--no-repack"]
    return cmd


class Server:
    """A server process on 127.0.0.1 serving ``model_path``; ``stop()`` ends it."""

    def __init__(self, kind: str, model: str, model_path: Path, ctx: int, threads: int, llama_server: str | None,
                 log_dir: Path, served_name: str | None = None, env: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = server_command(kind, model, model_path, ctx=ctx, threads=threads, port=self.port,
                             llama_server=llama_server)
        if served_name and kind.startswith("fucina"):  # the others answer to any name
            cmd += ["--served-model-name", served_name]
        self.log = open(log_dir / f"{kind}.log", "a")  # appended: --fresh starts a server once per repeat
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.cmd = cmd
        #: The model id this server answers to (fucina checks it; the others accept any).
        self.model_id = served_name or (model_id(model) if kind.startswith("fucina") else "m")

    def wait_ready(self, httpx, timeout: float = 600) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.kind} exited ({self.proc.returncode}); see {self.log.name}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{self.kind} did not start within {timeout:.0f}s; see {self.log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def stream_completion(httpx, url: str, model: str, prompt: str, max_tokens: int,
                      count_tokens) -> tuple[str, int, float, float, float]:
    """Stream one greedy completion; returns (text, tokens, ttft, decode tok/s, wall seconds)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first = last = None
    parts: list[str] = []
    usage_tokens = None
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            doc = json.loads(line[6:])
            if doc.get("usage"):
                usage_tokens = doc["usage"].get("completion_tokens")
            for ch in doc.get("choices") or []:
                text = ch.get("text") or ""
                if text:
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
                    parts.append(text)
    wall = time.perf_counter() - t0
    text = "".join(parts)
    tokens = usage_tokens if usage_tokens else count_tokens(text)
    ttft = (first - t0) if first is not None else wall
    span = (last - first) if first is not None and last is not None else 0.0
    return text, tokens, ttft, decode_rate(tokens, span), wall


def decode_rate(tokens: int, span: float) -> float:
    """Tokens per second after the first: ``tokens - 1`` arrived in the ``span`` seconds from the first
    content to the last (0 when there is no such span)."""
    return (tokens - 1) / span if span > 0 and tokens > 1 else 0.0


def _render(tok, text: str) -> str:
    tmpl = tok.chat_template()
    return tok.apply_chat_template([{"role": "user", "content": text}]) if tmpl else text


def _summary(samples: Sequence[Sample]) -> dict:
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.workload + ":" + s.group, s.server), []).append(s)
    out: dict = {}
    for (g, server), ss in sorted(groups.items()):
        out.setdefault(g, {})[server] = {
            "decode_tps": statistics.median(s.decode_tps for s in ss),
            "ttft": statistics.median(s.ttft for s in ss),
            "wall": statistics.median(s.wall for s in ss),
            "n": len(ss),
        }
    return out


#: Each speculating server and the plain server it is measured against (same engine, same settings).
PLAIN_OF = {"fucina": "fucina-plain", "fucina-xreq": "fucina-plain", "lcp-pld": "lcp", "ngram-mod": "llama-server", "ngram-simple": "llama-server",
            "ngram-map-k": "llama-server"}


def text_sha(text: str) -> str:
    """The first 16 hex digits of the answer's sha256: enough to tell two answers apart, not to store them."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _answers(samples: Sequence[dict]) -> dict[str, tuple[int, int]]:
    """Per speculating server: (answers equal to its plain server's answer to the same request and repeat,
    answers compared). Samples written before answers were hashed compare nothing."""
    plain = {(s["server"], s["group"], s["item"], s["repeat"]): s.get("text_sha", "")
             for s in samples if s["workload"] == "task"}
    out: dict[str, list[int]] = {}
    for s in samples:
        other = plain.get((PLAIN_OF.get(s["server"], ""), s["group"], s["item"], s["repeat"]))
        if s["workload"] != "task" or not other or not s.get("text_sha"):
            continue
        tally = out.setdefault(s["server"], [0, 0])
        tally[0] += s["text_sha"] == other
        tally[1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def _answers_table(samples: Sequence[dict]) -> list[str]:
    got = _answers(samples)
    if not got:
        return []
    lines = ["## Answers equal to the same server's plain answer (same request, same repeat)", "",
             "| server | equal |", "|---|---:|"]
    lines += [f"| {k} / {PLAIN_OF[k]} | {eq}/{n} |" for k, (eq, n) in got.items()]
    return lines + ["", "fucina's servers are lossless: on the exact engine every answer equals its plain server's. "
                    "llama.cpp's draftless modes and llama-cpp-python's prompt lookup are not.", ""]


def _seen(sample: dict) -> bool:
    # Results written before the field existed ran without --fresh: every repeat after the first was seen.
    return bool(sample.get("seen", sample["repeat"] > 0))


def _speedups(samples: Sequence[dict], seen: bool | None = None) -> dict[str, dict[str, float]]:
    """Per task group: median over tasks of (median decode tok/s of a speculating server / its plain one).

    ``seen``: only the requests the server had (True) or had not (False) served before; None: all."""
    per: dict[tuple[str, str, str], list[float]] = {}
    for s in samples:
        if s["workload"] == "task" and (seen is None or _seen(s) == seen):
            per.setdefault((s["group"], s["item"], s["server"]), []).append(s["decode_tps"])
    med = {k: statistics.median(v) for k, v in per.items()}
    out: dict[str, dict[str, list[float]]] = {}
    for (group, item, server), v in med.items():
        plain = med.get((group, item, PLAIN_OF.get(server, "")))
        if plain:
            out.setdefault(group, {}).setdefault(server, []).append(v / plain)
    return {g: {k: statistics.median(v) for k, v in row.items()} for g, row in sorted(out.items())}


#: The speedup tables: (which requests, title).
SPEEDUP_TABLES = (
    (False, "Speculative speedup over the same server's plain decoding, first sight of each request "
            "(decode tok/s, median over tasks)"),
    (True, "The same, requests the server had served before (a server that remembers across requests "
           "drafts the earlier answer)"),
)


def _speedup_table(samples: Sequence[dict], servers: Sequence[str]) -> list[str]:
    spec = [s for s in servers if PLAIN_OF.get(s) in servers]
    out: list[str] = []
    for seen, title in SPEEDUP_TABLES:
        table = _speedups(samples, seen)
        if spec and table:
            out += _one_speedup_table(table, spec, title)
    return out


def _one_speedup_table(table: dict[str, dict[str, float]], spec: Sequence[str], title: str) -> list[str]:
    lines = [f"## {title}", "",
             "| group | " + " | ".join(f"{s} / {PLAIN_OF[s]}" for s in spec) + " |", "|---" * (len(spec) + 1) + "|"]
    for g, row in table.items():
        lines.append(f"| {g} | " + " | ".join(f"{row[s]:.2f}x" if s in row else "-" for s in spec) + " |")
    every = {s: [row[s] for row in table.values() if s in row] for s in spec}
    lines.append("| **median of groups** | " + " | ".join(
        f"**{statistics.median(v):.2f}x**" if v else "-" for v in every.values()) + " |")
    return lines + [""]


def _markdown(summary: dict, servers: Sequence[str], meta: dict, samples: Sequence[dict] = ()) -> str:
    """Ratios to the first server of ``--servers`` that is llama.cpp's plain server (else the first)."""
    base = "llama-server" if "llama-server" in servers else servers[0]
    head = ["| group | " + " | ".join(servers) + " |", "|---" * (len(servers) + 1) + "|"]
    lines = [f"# HTTP benchmark ({meta['model']}, {meta['date']})", "", f"Machine: {meta['machine']}",
             f"Command: `{meta['command']}`", ""]
    if meta.get("fucina_engine"):
        lines += [f"fucina's engine: `FUCINA_ENGINE={meta['fucina_engine']}`", ""]
    lines += [f"Ratios to `{base}` (medians).", ""]
    tables = (("task:", "decode_tps", "Decode speed, every repeat pooled (tok/s ratio; higher is faster; first sight and served before apart below)", False),
              ("turn:", "ttft", "Time to first token per agent turn (ms; turn1 = cold, turnn = later turns)", True),
              ("session:", "wall", "Wall time of a whole agent session (ratio; lower is faster)", False))
    for prefix, key, title, absolute in tables:
        rows = {g: r for g, r in summary.items() if g.startswith(prefix)}
        if not rows:
            continue
        lines += [f"## {title}", "", *head]
        for g, row in rows.items():
            ref = row.get(base, {}).get(key) or 0.0
            cells = []
            for s in servers:
                v = row.get(s)
                if v is None:
                    cells.append("-")
                elif absolute or not ref:
                    cells.append(f"{1000 * v[key]:.0f}" if key == "ttft" else f"{v[key]:.2f}")
                else:
                    cells.append(f"{v[key] / ref:.2f}x")
            lines.append(f"| {g[len(prefix):]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines + _speedup_table(samples, servers) + _answers_table(samples))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.http", description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, help="bench task file (JSONL)")
    ap.add_argument("--traces", type=Path, help="agent traces (JSONL: source, trajectory, step, context, output)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--servers", default=",".join(SERVERS[1:]), help=f"comma list of {','.join(SERVERS)}")
    ap.add_argument("--llama-server", help="path of the llama-server binary")
    ap.add_argument("--per-group", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fresh", action="store_true",
                    help="restart every server before each repeat, so no request is one it served before")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds to wait before a request when the one before went to another server: "
                         "llama.cpp's OpenMP threads spin on after a request and would slow the next server's")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--session-gen", type=int, default=32, help="tokens per agent turn")
    ap.add_argument("--session-tokens", type=int, default=3000, help="first N prompt tokens of each turn")
    ap.add_argument("--sessions", type=int, default=None, help="at most N trajectories")
    ap.add_argument("--session-steps", type=int, default=None, help="at most the first N requests of each")
    ap.add_argument("--trace-source", default=None, help="only trajectories of this source (aider, swe-agent)")
    ap.add_argument("--out", type=Path, default=Path("bench-http"))
    ap.add_argument("--render", type=Path, metavar="RESULTS_JSON", help="re-render results.md from a results.json")
    a = ap.parse_args(argv)
    if a.render:
        doc = json.loads(a.render.read_text())
        servers = list(doc["meta"].get("servers") or SERVERS)
        text = _markdown(doc["summary"], servers, doc["meta"], doc["samples"])
        (a.render.parent / "results.md").write_text(text)
        print(text)
        return 0
    import httpx

    from fucina.bench.suite import load_tasks, select_tasks
    from fucina.calibrate import cpu_name
    from fucina.catalog import load_tokenizer, resolve_model

    servers = [s.strip() for s in a.servers.split(",") if s.strip()]
    bad = [s for s in servers if s not in SERVERS]
    if bad or not (a.tasks or a.traces):
        ap.error(f"unknown servers {bad}" if bad else "give --tasks and/or --traces")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    path = resolve_model(a.model)
    tok = load_tokenizer(a.model)

    def count(text: str) -> int:
        return len(tok.tokenize(text, add_bos=False))

    tasks = select_tasks(load_tasks(a.tasks), per_group=a.per_group) if a.tasks else []
    sessions: dict[str, list[str]] = {}
    if a.traces:
        for line in a.traces.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                if a.trace_source and r["source"] != a.trace_source:
                    continue
                ids = tok.tokenize(r["context"], add_bos=False)[: a.session_tokens]
                sessions.setdefault(f"{r['source']}:{r['trajectory']}", []).append(_render(tok, tok.detokenize(ids)))
        if a.sessions:
            sessions = dict(list(sessions.items())[: a.sessions])
        if a.session_steps:
            sessions = {k: v[: a.session_steps] for k, v in sessions.items()}
    a.out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="bench-http-logs-", dir=a.out))
    samples: list[Sample] = []
    running: list = []

    def restart() -> None:
        """Stop what runs (a server stopped is dropped first, so a failed start stops nothing twice)
        and start every server afresh: no request any of them served is remembered."""
        while running:
            running.pop().stop()
        for k in servers:
            running.append(InProcess(a.model, a.ctx, a.threads) if k == "api" else
                           Server(k, a.model, path, a.ctx, a.threads, a.llama_server, logs))
        for s in running:
            s.wait_ready(httpx)

    last = None  # the server the previous request went to

    def request(s, prompt: str, max_tokens: int):
        nonlocal last
        if last is not None and last is not s:
            time.sleep(a.settle)  # the other server's threads stop spinning before this one is timed
        last = s
        if isinstance(s, InProcess):
            return s.stream(prompt, max_tokens)
        return stream_completion(httpx, s.url, s.model_id, prompt, max_tokens, count)

    try:
        for rep in range(a.repeats if tasks else 0):
            if rep == 0 or a.fresh:
                restart()
            for t in tasks:
                prompt = _render(tok, t.prompt)
                for s in running:  # interleaved: drift hits every server alike
                    text, n, ttft, tps, wall = request(s, prompt, t.gen)
                    samples.append(Sample(s.kind, "task", t.group, t.id, rep, len(prompt), n, ttft, tps, wall,
                                          seen=rep > 0 and not a.fresh, text_sha=text_sha(text)))
                print(f"\rrepeat {rep + 1}/{a.repeats} {t.id}", end="", file=sys.stderr, flush=True)
        if sessions and (a.fresh or not running):
            restart()
        for name, turns in sessions.items():
            group = name.split(":")[0]
            for s in running:
                t0 = time.perf_counter()
                for i, prompt in enumerate(turns):
                    _, n, ttft, tps, wall = request(s, prompt, a.session_gen)
                    samples.append(Sample(s.kind, "turn", f"{group}-turn{'1' if i == 0 else 'n'}", f"{name}/{i}", 0,
                                          len(prompt), n, ttft, tps, wall))
                samples.append(Sample(s.kind, "session", group, name, 0, 0, 0, 0.0, 0.0, time.perf_counter() - t0))
            print(f"\rsession {name}", end="", file=sys.stderr, flush=True)
    finally:
        for s in running:
            s.stop()
    print(file=sys.stderr)
    meta = {"model": a.model, "date": time.strftime("%Y-%m-%d"), "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
            "command": "python -m benchmarks.http " + " ".join(sys.argv[1:] if argv is None else argv),
            "servers": {s.kind: s.cmd for s in running}, "threads": a.threads, "ctx": a.ctx,
            "fresh": a.fresh,
            # fucina's servers inherit this process's engine choice (FUCINA_ENGINE; auto = patched when built)
            "fucina_engine": os.environ.get("FUCINA_ENGINE", "auto")}
    summary = _summary(samples)
    rows = [asdict(s) for s in samples]
    (a.out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "samples": rows}, indent=1))
    (a.out / "results.md").write_text(_markdown(summary, servers, meta, rows))
    print((a.out / "results.md").read_text())
    for server, (equal, n) in _answers(rows).items():
        if server.startswith("fucina") and equal < n:
            print(f"{server}: {n - equal} of {n} answers differ from {PLAIN_OF[server]}'s (lossless on the exact "
                  "engine; on the stock engine streams may part at a near-tie)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

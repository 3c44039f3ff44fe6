"""Speculative vs plain, token for token, on real prompts: the exactness audit.

``python -m benchmarks.exactness (--bench-dir DIR | --prompt-file FILE) [--model M ...] [--prompts N] [--gen N] [--exact-load] [--json]``

For each prompt and each sampling mode (greedy, and t=0.8/top-k 20 sampled) it decodes plainly and
speculatively (full cascade, verify_all: every step that can verify does) and reports whether
the streams are identical; at a divergence it reports the plain row's top-2 logit gap there (a
near-tie flipped by the engine's batched rounding) and whether the speculative token was the plain
row's runner-up. Run it under the exact engine variant (``fucina.engine.exact_env``) to check the
*exact* level; under the standard build to measure the divergence rate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence


from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.topk import top2_gap

GREEDY = SamplerOptions()
SAMPLED = SamplerOptions(temperature=0.8, top_k=20, seed=0)


@dataclass(frozen=True)
class Divergence:
    prompt_id: str
    mode: str
    position: int  # index into the generated tokens
    plain_token: int
    spec_token: int
    top2_gap: float  # plain row: logit(top1) - logit(top2)
    spec_is_runner_up: bool


@dataclass(frozen=True)
class ExactnessResult:
    model: str
    exact_load: bool
    runs: int
    identical: int
    divergences: tuple[Divergence, ...]
    verifies: int
    accepted: int
    drafted: int
    max_draft: int


def prompt_file(path: str | Path, n: int | None = None) -> list[tuple[str, str]]:
    """``(id, text)`` pairs from a JSONL file of ``{"id": ..., "text": ...}`` objects (the first ``n``)."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = [(str(r["id"]), str(r["text"])) for r in rows]
    return pairs if n is None else pairs[:n]


def dev_prompts(n: int, bench_dir: Path) -> list[tuple[str, str]]:
    """First-turn prompts, round-robin over Spec-Bench groups so every kind of text is covered."""
    path = Path(bench_dir) / "spec_bench_dev.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        by_group.setdefault(r["group"], []).append(r)
    out: list[tuple[str, str]] = []
    i = 0
    while len(out) < n and any(i < len(v) for v in by_group.values()):
        for g in sorted(by_group):
            if i < len(by_group[g]) and len(out) < n:
                r = by_group[g][i]
                out.append((f"sb-{r['question_id']}", r["turns"][0][:1500]))
        i += 1
    return out


def encode(model, text: str) -> list[int]:
    """Through the chat template when the model has one, raw otherwise."""
    if model.chat_template() is not None:
        rendered = model.apply_chat_template([{"role": "user", "content": text}])
        return model.tokenize(rendered, add_bos=False, special=True)
    return model.tokenize(text, add_bos=model.add_bos_default)


def _plain(model, prompt, opts, n, stops):
    from fucina.plain import PlainDecoder

    model.reset()
    top2: list[tuple[int, int, float]] = []  # per position; a full row copy would be 1 MiB at 262k
    d = PlainDecoder(model, Sampler(opts))
    orig = d.sampler.sample
    d.sampler.sample = lambda row, hist: (top2.append(top2_gap(row)), orig(row, hist))[1]
    d.feed(prompt)
    out = list(d.generate(n, stops))
    return out, top2


def _spec(model, prompt, opts, n, stops, table, max_draft, source="cascade", expected=()):
    from fucina.decoders import DecoderFactory, SpeculationOptions
    from fucina.speculative.decoder import SpecOptions
    from fucina.speculative.policy import PolicyOptions
    from fucina.speculative.scripted import ScriptedSource

    model.reset()
    # The default cascade as it is (no cost table decides recycling), verify_all, no live cost rescale.
    decoders = DecoderFactory(model, SpeculationOptions(
        cost_table=table, decoder=SpecOptions(policy=PolicyOptions(max_draft=max_draft), verify_all=True),
        recycling_by_costs=False, clock=None))
    if source == "cascade":
        d = decoders.decoder(Sampler(opts))
    else:  # scripted adversaries drafting around the plain run's own continuation
        d = decoders.decoder(Sampler(opts), source=ScriptedSource(list(prompt) + list(expected), model.vocab_size,
                                                                   source, seed=1))
    d.feed(prompt)
    out = list(d.generate(n, stops))
    return out, d.stats


def compare(model, name: str, prompts: Sequence[tuple[str, str]], gen: int, exact_load: bool,
            modes: Sequence[str] = ("greedy", "sampled"), sources: Sequence[str] = ("cascade",)) -> ExactnessResult:
    from fucina.speculative.costs import CostTable

    from fucina.decoders import capped_max_draft
    from fucina.doctor import DEFAULT_MAX_DRAFT, check_batch_invariance

    table = CostTable(((2, 1.0),), "exactness audit: gate is forced open, costs unused")
    stops = model.eos_ids
    # The same draft cap `fucina generate --exact --spec` applies (none where the engine needs none).
    max_draft = capped_max_draft(DEFAULT_MAX_DRAFT, exact=exact_load, report=check_batch_invariance(model))
    runs = same = ver = acc = dr = 0
    divs: list[Divergence] = []
    for pid, text in prompts:
        prompt = encode(model, text)
        for mode in modes:
            opts = GREEDY if mode == "greedy" else SAMPLED
            plain, rows = _plain(model, prompt, opts, gen, stops)
            for source in sources:
                spec, st = _spec(model, prompt, opts, gen, stops, table, max_draft, source, plain)
                runs += 1
                ver, acc, dr = ver + st.verifies, acc + st.accepted, dr + st.drafted
                if spec == plain:
                    same += 1
                    continue
                i = next((j for j, (a, b) in enumerate(zip(plain, spec)) if a != b), min(len(plain), len(spec)))
                if i < len(rows) and i < len(spec):
                    _, second, gap = rows[i]
                    divs.append(Divergence(pid, f"{mode}/{source}", i, plain[i], spec[i], gap, second == spec[i]))
                else:
                    divs.append(Divergence(pid, f"{mode}/{source}", i, -1, -1, float("nan"), False))
    model.reset()
    return ExactnessResult(name, exact_load, runs, same, tuple(divs), ver, acc, dr, max_draft)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.exactness", description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=None, help="repeatable; default gemma3-270m and smollm2-135m")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--exact-load", action="store_true",
                    help="use_extra_bufts=False (default: the engine's default load, which is that on the patched engine)")
    ap.add_argument("--bufts", action="store_true", help="force use_extra_bufts=True (to show the check bites)")
    ap.add_argument("--modes", default="greedy,sampled")
    ap.add_argument("--sources", default="cascade", help="comma list of cascade,perfect,garbage,alternating,partial")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--bench-dir", help="directory holding spec_bench_dev.jsonl (Spec-Bench dev questions)")
    where.add_argument("--prompt-file", help='JSONL of {"id": ..., "text": ...} prompts')
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from fucina.catalog import load_model

    prompts = prompt_file(a.prompt_file, a.prompts) if a.prompt_file else dev_prompts(a.prompts, Path(a.bench_dir))
    results = []
    for name in a.model or ["gemma3-270m", "smollm2-135m"]:
        bufts = True if a.bufts else (False if a.exact_load else None)
        model = load_model(name, n_ctx=2048, use_extra_bufts=bufts)
        exact_load = not model.options.use_extra_bufts
        res = compare(model, name, prompts, a.gen, exact_load, a.modes.split(","), a.sources.split(","))
        model.close()
        results.append(res)
        if not a.json:
            print(f"{name}: {res.identical}/{res.runs} identical (exact_load={exact_load}); "
                  f"{res.verifies} verifies, acceptance {res.accepted}/{res.drafted}", file=sys.stderr)
            for d in res.divergences:
                print(f"  {d.prompt_id} {d.mode} @{d.position}: plain {d.plain_token} spec {d.spec_token} "
                      f"top2 gap {d.top2_gap:.3f} runner-up={d.spec_is_runner_up}", file=sys.stderr)
    if a.json:
        print(json.dumps([asdict(r) for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

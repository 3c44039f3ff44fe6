"""Structured outputs: JSON extraction under a schema, plain vs speculative constrained decoding (BENCHMARKS.md).

``python -m benchmarks.structured MODEL [--repeats R] [--tasks N] [--out FILE]``

Each task is a short document in the prompt and a JSON schema to fill from it (an invoice, a bug
report, a person, a product listing, meeting notes, a shipping notice), sent through the model's
chat template, greedy. Methods, interleaved within each repeat (task order rotates):

* ``free``: plain decoding, no grammar (what the mask's cost is measured against);
* ``plain`` and ``plain-aa``: plain constrained decoding, twice (the A/A column);
* ``spec``: speculative constrained decoding with grammar-forced drafts (the product's path);
* ``spec-nogd``: the same without grammar-forced drafts (what they add).

Reported per task: decode ms per token (median over repeats), ``spec`` over ``plain`` as a decode
speedup and end to end, the mask's cost (``plain`` ms/token over ``free``'s), the grammar source's
accepted/drafted, and two checks that can fail the run: every constrained answer parses and
validates, and ``spec`` equals ``plain`` token for token (exact level on the patched engine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

TASKS: tuple[tuple[str, str, dict], ...] = (
    ("invoice", "Invoice INV-2291 from Acme Tools GmbH, dated 2026-03-14. Items: 4 x torque wrench at 38.50 EUR, "
     "2 x socket set at 64.00 EUR, 1 x tool case at 29.90 EUR. Total 311.90 EUR. Status: paid by bank transfer.",
     {"type": "object", "properties": {
         "invoice_number": {"type": "string"}, "vendor": {"type": "string"}, "date": {"type": "string", "format": "date"},
         "currency": {"enum": ["EUR", "USD", "GBP"]}, "paid": {"type": "boolean"},
         "items": {"type": "array", "items": {"type": "object", "properties": {
             "description": {"type": "string"}, "quantity": {"type": "integer"}, "unit_price": {"type": "number"}},
             "required": ["description", "quantity", "unit_price"], "additionalProperties": False}},
         "total": {"type": "number"}},
      "required": ["invoice_number", "vendor", "date", "currency", "paid", "items", "total"],
      "additionalProperties": False}),
    ("bug", "Bug report #5127: the export button crashes the app on Android 14 when the file name contains an emoji. "
     "Reported by maria.k@example.org. Severity high; reproducible every time; affects versions 3.2.0 and 3.2.1. "
     "Workaround: rename the file first.",
     {"type": "object", "properties": {
         "id": {"type": "integer"}, "title": {"type": "string"}, "platform": {"type": "string"},
         "reporter_email": {"type": "string", "format": "email"}, "severity": {"enum": ["low", "medium", "high"]},
         "reproducible": {"type": "boolean"}, "affected_versions": {"type": "array", "items": {"type": "string"}},
         "workaround": {"type": "string"}},
      "required": ["id", "title", "platform", "reporter_email", "severity", "reproducible", "affected_versions",
                   "workaround"], "additionalProperties": False}),
    ("person", "Dr. Amara Okafor (born 1979) is a marine biologist at the University of Lagos. She speaks English, "
     "Yoruba and French, has published 42 papers, and lives in Lagos, Nigeria.",
     {"type": "object", "properties": {
         "name": {"type": "string"}, "birth_year": {"type": "integer"}, "occupation": {"type": "string"},
         "employer": {"type": "string"}, "languages": {"type": "array", "items": {"type": "string"}},
         "papers": {"type": "integer"}, "city": {"type": "string"}, "country": {"type": "string"}},
      "required": ["name", "birth_year", "occupation", "employer", "languages", "papers", "city", "country"],
      "additionalProperties": False}),
    ("product", "Listing: Nordlys desk lamp, model NL-40, aluminium, 3 colour temperatures (2700K, 4000K, 6500K), "
     "USB-C powered, 8 W, weight 1.2 kg. Price 79.00 USD, in stock: 23 units. Rated 4.6 of 5 by 318 buyers.",
     {"type": "object", "properties": {
         "name": {"type": "string"}, "model": {"type": "string"}, "material": {"type": "string"},
         "color_temperatures_k": {"type": "array", "items": {"type": "integer"}}, "power_w": {"type": "number"},
         "weight_kg": {"type": "number"}, "price": {"type": "number"}, "currency": {"enum": ["EUR", "USD", "GBP"]},
         "in_stock": {"type": "integer"}, "rating": {"type": "number"}, "reviews": {"type": "integer"}},
      "required": ["name", "model", "material", "color_temperatures_k", "power_w", "weight_kg", "price", "currency",
                   "in_stock", "rating", "reviews"], "additionalProperties": False}),
    ("meeting", "Meeting notes, 2026-11-20, platform team. Attendees: Lena, Omar, Priya. Decisions: move the "
     "nightly build to 02:00 UTC; adopt the new on-call rota. Action items: Omar updates the CI schedule by Friday; "
     "Priya drafts the rota; Lena books the retro.",
     {"type": "object", "properties": {
         "date": {"type": "string", "format": "date"}, "team": {"type": "string"},
         "attendees": {"type": "array", "items": {"type": "string"}},
         "decisions": {"type": "array", "items": {"type": "string"}},
         "action_items": {"type": "array", "items": {"type": "object", "properties": {
             "owner": {"type": "string"}, "task": {"type": "string"}}, "required": ["owner", "task"],
             "additionalProperties": False}}},
      "required": ["date", "team", "attendees", "decisions", "action_items"], "additionalProperties": False}),
    ("shipping", "Shipment notice: order 88-4410 left the Rotterdam warehouse on 2026-10-02 with carrier DHL, "
     "tracking JJD0099912345. 3 parcels, 14.5 kg in total, insured. Expected delivery 2026-10-06 to Turin, Italy.",
     {"type": "object", "properties": {
         "order": {"type": "string"}, "origin": {"type": "string"}, "shipped": {"type": "string", "format": "date"},
         "carrier": {"type": "string"}, "tracking": {"type": "string"}, "parcels": {"type": "integer"},
         "weight_kg": {"type": "number"}, "insured": {"type": "boolean"},
         "expected": {"type": "string", "format": "date"}, "destination": {"type": "string"}},
      "required": ["order", "origin", "shipped", "carrier", "tracking", "parcels", "weight_kg", "insured", "expected",
                   "destination"], "additionalProperties": False}),
)
METHODS = ("free", "plain", "plain-aa", "spec", "spec-nogd")


def messages(doc: str, schema: dict) -> list[dict]:
    return [{"role": "system", "content": "Extract the facts of the document as JSON matching this schema:\n"
             + json.dumps(schema)},
            {"role": "user", "content": doc}]


def run(model: str, repeats: int, n_tasks: int, gen: int) -> dict:
    import jsonschema

    from fucina import LLM
    from fucina.grammar import Grammar
    from fucina.speculative.decoder import SpecOptions

    llm = LLM(model)
    nogd = LLM(llm.model, cost_table=llm.cost_table, spec_options=SpecOptions(grammar_drafts=False),
               exact=llm.exact, name=llm.name)
    tasks = TASKS[:n_tasks]
    rows: dict[str, dict[str, list]] = {name: {m: [] for m in METHODS} for name, _, _ in tasks}
    failures: list[str] = []
    for rep in range(repeats):
        for i in range(len(tasks)):
            name, doc, schema = tasks[(i + rep) % len(tasks)]
            grammar = Grammar.json_schema(schema)
            msgs = messages(doc, schema)
            outputs = {}
            for method in METHODS[rep % 2:] + METHODS[:rep % 2]:  # alternate who goes first
                kw = dict(max_tokens=gen, temperature=0, speculative=method.startswith("spec"))
                if method != "free":
                    kw["grammar"] = grammar
                who = nogd if method == "spec-nogd" else llm
                for x in (llm, nogd):  # every method pays its own prefill: end to end compares like with like
                    x.reset()
                t0 = time.perf_counter()
                r = who.chat(msgs, **kw)
                wall = time.perf_counter() - t0
                outputs[method] = r.token_ids
                grammar_src = next((s for s in (r.stats.sources if r.stats else ()) if s.name == "grammar"), None)
                rows[name][method].append(dict(
                    tokens=len(r.token_ids), decode=r.timings.generate_seconds, wall=wall,
                    prompt=r.timings.prompt_seconds,
                    grammar=(grammar_src.accepted, grammar_src.drafted) if grammar_src else None))
                if method != "free" and r.finish_reason == "length":
                    failures.append(f"{name}/{method}: unfinished at {gen} tokens")
                elif method != "free":
                    try:
                        jsonschema.validate(json.loads(r.text), schema)
                    except Exception as exc:  # noqa: BLE001 - recorded as a failure of the run
                        failures.append(f"{name}/{method}: {type(exc).__name__}: {str(exc)[:120]}")
            for method in ("spec", "spec-nogd"):
                if outputs[method] != outputs["plain"]:
                    failures.append(f"{name}: {method} != plain")
            print(f"repeat {rep + 1}/{repeats} {name}: " + " ".join(
                f"{m}={1000 * rows[name][m][-1]['decode'] / max(1, rows[name][m][-1]['tokens']):.1f}ms/tok"
                for m in METHODS), file=sys.stderr, flush=True)
    return {"model": model, "level": llm.level, "repeats": repeats, "gen": gen, "rows": rows, "failures": failures}


def ms_per_token(samples: list[dict]) -> float:
    return statistics.median(1000 * s["decode"] / max(1, s["tokens"]) for s in samples)


def report(res: dict) -> str:
    lines = [f"model {res['model']}  level {res['level']}  repeats {res['repeats']}  greedy",
             "| task | tokens | free ms/tok | plain ms/tok | A/A | mask cost | spec ms/tok | decode speedup | "
             "without grammar drafts | end to end | grammar a/d |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    speedups, nogds, e2e, masks, aas = [], [], [], [], []
    for name, per in res["rows"].items():
        free, pl, aa, sp, _ = (ms_per_token(per[m]) for m in METHODS)
        plain_decode = statistics.median(p["decode"] for p in per["plain"])
        s_dec = plain_decode / statistics.median(p["decode"] for p in per["spec"])
        s_nogd = plain_decode / statistics.median(p["decode"] for p in per["spec-nogd"])
        nogds.append(s_nogd)
        s_e2e = statistics.median(p["wall"] for p in per["plain"]) / statistics.median(p["wall"] for p in per["spec"])
        g = per["spec"][-1]["grammar"] or (0, 0)
        speedups.append(s_dec)
        e2e.append(s_e2e)
        masks.append(pl / free)
        aas.append(pl / aa)
        lines.append(f"| {name} | {per['plain'][-1]['tokens']} | {free:.1f} | {pl:.1f} | {pl / aa:.2f} | "
                     f"{100 * (pl / free - 1):+.1f}% | {sp:.1f} | {s_dec:.2f}x | {s_nogd:.2f}x | {s_e2e:.2f}x | {g[0]}/{g[1]} |")
    lines.append(f"| **median** | | | | {statistics.median(aas):.2f} | {100 * (statistics.median(masks) - 1):+.1f}% | "
                 f"| **{statistics.median(speedups):.2f}x** | {statistics.median(nogds):.2f}x | "
                 f"{statistics.median(e2e):.2f}x | |")
    lines.append("failures: " + ("; ".join(res["failures"]) if res["failures"] else "none (every answer validates; "
                                 "spec == plain token for token)"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=len(TASKS))
    ap.add_argument("--gen", type=int, default=400)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    res = run(a.model, a.repeats, a.tasks, a.gen)
    text = report(res)
    print(text)
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

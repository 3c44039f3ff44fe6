"""Run under the exact engine (see test_grammar_real.py): constrained speculative vs plain constrained.

Prints one JSON object per model: runs, identical runs, valid answers, grammar drafts and any mismatch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jsonschema  # noqa: E402

from fucina import LLM  # noqa: E402
from fucina.grammar import Grammar  # noqa: E402
from fucina.speculative.costs import CostTable  # noqa: E402
from tests.grammar_schemas import SCHEMAS  # noqa: E402

FREE = CostTable(((2, 1.0), (32, 1.0)), "probe: free verifies, so every step that can verify does")
DOC = "Invoice INV-0042 from Acme, 2026-03-14: 2 x widget at 4.50 EUR, 1 x bolt at 0.20 EUR; paid. Contact ada@acme.io."
NAMES = ("extraction", "nested", "enum_array", "date", "email", "array_of_objects")


def main(models: list[str], gen: int) -> None:
    for name in models:
        llm = LLM(name, n_ctx=2048, exact=True, cost_table=FREE, progress=False)
        chat = name == "smollm2-135m"  # the instruct model through its template, the base model raw
        runs = same = valid = finished = drafted = accepted = 0
        bad = []
        for i, schema_name in enumerate(NAMES):
            schema = SCHEMAS[schema_name]
            g = Grammar.json_schema(schema)
            text = f"Extract from the document as JSON ({json.dumps(schema)}):\n{DOC}\nJSON:"
            call = (lambda **k: llm.chat([{"role": "user", "content": text}], **k)) if chat else \
                (lambda **k: llm.complete(text, **k))
            for mode, kw in (("greedy", dict(temperature=0)),
                             ("sampled", dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=i))):
                spec = call(max_tokens=gen, grammar=g, **kw)
                plain = call(max_tokens=gen, grammar=g, speculative=False, **kw)
                runs += 1
                grammar = next(s for s in spec.stats.sources if s.name == "grammar")
                drafted += grammar.drafted
                accepted += grammar.accepted
                if (spec.token_ids, spec.finish_reason) == (plain.token_ids, plain.finish_reason):
                    same += 1
                else:
                    bad.append({"schema": schema_name, "mode": mode, "spec": spec.text, "plain": plain.text})
                if plain.finish_reason == "stop":
                    finished += 1
                    try:
                        jsonschema.validate(json.loads(plain.text), schema)
                        valid += 1
                    except (ValueError, jsonschema.ValidationError) as exc:
                        bad.append({"schema": schema_name, "mode": mode, "invalid": str(exc)[:200]})
        print(json.dumps({"model": name, "level": llm.level, "runs": runs, "identical": same, "finished": finished,
                          "valid": valid, "grammar_drafted": drafted, "grammar_accepted": accepted,
                          "mismatches": bad[:3]}))
        llm.close()


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]))

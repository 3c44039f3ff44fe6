"""Run under the exact engine (see test_api_exact.py): LLM speculative vs plain with stop strings
(text, tokens, finish reason and the logprobs of every token, with 2 alternatives).

Prints one JSON object per model: runs, identical runs, drafted/accepted tokens and any mismatch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fucina import LLM
from fucina.speculative.costs import CostTable

PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
FREE = CostTable(((2, 1.0), (32, 1.0)), "probe: free verifies, so every step that can verify does")


def main(models: list[str], n_prompts: int, gen: int) -> None:
    prompts = [json.loads(line)["text"] for line in PROMPTS.read_text().splitlines()[:n_prompts]]
    for name in models:
        llm = LLM(name, n_ctx=2048, exact=True, cost_table=FREE, progress=False)
        chat = name == "smollm2-135m"  # the instruct model through its template, the base model raw
        runs = same = drafted = accepted = 0
        bad = []
        for i, text in enumerate(prompts):
            for mode, kw in (("greedy", dict(temperature=0)),
                             ("sampled", dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=i))):
                call = (lambda **k: llm.chat([{"role": "user", "content": text}], **k)) if chat else \
                    (lambda **k: llm.complete(text, **k))
                full = call(max_tokens=gen, speculative=False, **kw).text
                # Stop strings met early, in the middle and never.
                for stop in (full[8:12], full[len(full) // 2:len(full) // 2 + 4], "\x00never"):
                    if not stop.strip():
                        continue
                    spec = call(max_tokens=gen, stop=stop, logprobs=2, **kw)
                    plain = call(max_tokens=gen, stop=stop, speculative=False, logprobs=2, **kw)
                    runs += 1
                    drafted += spec.stats.drafted
                    accepted += spec.stats.accepted
                    # The logprobs too: the rows each token was sampled from are bitwise plain decoding's.
                    if (spec.text, spec.token_ids, spec.finish_reason, spec.logprobs) == (
                            plain.text, plain.token_ids, plain.finish_reason, plain.logprobs):
                        same += 1
                    else:
                        bad.append({"prompt": i, "mode": mode, "stop": stop, "spec": spec.text, "plain": plain.text})
        print(json.dumps({"model": name, "level": llm.level, "runs": runs, "identical": same, "drafted": drafted,
                          "accepted": accepted, "mismatches": bad[:3]}))
        llm.close()


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]))

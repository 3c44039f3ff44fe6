#!/usr/bin/env bash
# "The cost of exactness" (docs/benchmarks-archive/2026-12-01-xeon.md; re-measured in BENCHMARKS.md, "The cost of exactness: K-quant column-group kernels"): the stock engine, the GGML_LLAMAFILE=OFF build loaded with
# --exact, and fucina's patched engine, side by side on this machine. Run it ALONE on an idle machine.
# Needs the bench task file (scripts/bench_all.sh writes it; or ../shared/bench/make_tasks.py).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
TASKS=${TASKS:-$OUT/tasks.jsonl}
mkdir -p "$OUT"
python -m fucina.engine build                          # the patched engine (cached)
python -m fucina.engine build --variant no-llamafile   # the older exact recipe, for comparison (cached)
# Batch invariance, plain step and verify costs (5 rounds over the engines), patched-vs-stock logits.
python -m benchmarks.engines --repeats 5 --json > "$OUT/engines.json"
python -c "import json,sys; from benchmarks.engines import render; print(render(json.load(open(sys.argv[1]))))" \
  "$OUT/engines.json" > "$OUT/engines.md"
# The suite on each engine: speedup over plain (interleaved in each run) and runs identical to plain.
NOLF=$(python -m fucina.engine path --variant no-llamafile)
for m in gemma3-270m smollm2-135m; do
  FUCINA_ENGINE=stock fucina bench --tasks "$TASKS" --model "$m" --no-exact --methods plain,fucina \
    --per-group 1 --repeats 3 --out "$OUT/engines-suite-$m-stock"
  FUCINA_ENGINE="$NOLF" fucina bench --tasks "$TASKS" --model "$m" --exact --methods plain,fucina \
    --per-group 1 --repeats 3 --out "$OUT/engines-suite-$m-no-llamafile"
  FUCINA_ENGINE=patched fucina bench --tasks "$TASKS" --model "$m" --methods plain,fucina \
    --per-group 1 --repeats 3 --out "$OUT/engines-suite-$m-patched"
done

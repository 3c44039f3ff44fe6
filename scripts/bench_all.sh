#!/usr/bin/env bash
# Reproduces every figure in BENCHMARKS.md. Run it ALONE on an idle machine (timings are ratios from
# one process, but two cores shared with anything else still skew them). Output: bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
SHARED=${SHARED:-../shared/bench}
PER_GROUP=${PER_GROUP:-2}
mkdir -p "$OUT"
export FUCINA_CACHE="$OUT/cache"   # fresh cost tables, calibrated on this quiet machine
python "$SHARED/make_tasks.py" --out "$OUT/tasks.jsonl" --per-group "$PER_GROUP"
python -m fucina.bench.sampling --json > "$OUT/sampling.json"
python -m fucina.bench.sam --from-bench --bench-dir "$SHARED" --repeats 3 --json > "$OUT/sam.json"
python -m fucina.bench.replay --from-bench --bench-dir "$SHARED" --json > "$OUT/replay.json"
for m in gemma3-270m smollm2-135m; do
  fucina spec-bench "$m" --repeats 5 --out "$OUT/cost-$m.json" > "$OUT/cost-$m.txt"
done
fucina bench --tasks "$OUT/tasks.jsonl" --model gemma3-270m --repeats 3 --out "$OUT/suite-gemma3"

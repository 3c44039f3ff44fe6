#!/usr/bin/env bash
# Reproduces every figure in BENCHMARKS.md. Run it ALONE on an idle machine (figures are ratios from
# one process, but two cores shared with anything else still skew them). Output: bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
SHARED=${SHARED:-../shared/bench}
PER_GROUP=${PER_GROUP:-3}
mkdir -p "$OUT"
export FUCINA_CACHE="$PWD/$OUT/cache"   # cost tables calibrated on this quiet machine, not reused ones
python "$SHARED/make_tasks.py" --out "$OUT/tasks.jsonl" --per-group "$PER_GROUP"
# Tier 1: model-free (sampler, SAM, cascade replay).
python -m benchmarks.sampling --json > "$OUT/sampling.json"
python -m benchmarks.sam --from-bench --bench-dir "$SHARED" --repeats 3 --json > "$OUT/sam.json"
python -m benchmarks.replay --from-bench --bench-dir "$SHARED" --json > "$OUT/replay.json"
python -m benchmarks.replay --from-bench --bench-dir "$SHARED" --no-recycling --no-synthetic > "$OUT/replay-sam-lanes.txt"
# Verify cost tables, standard build.
for m in gemma3-270m smollm2-135m; do
  fucina spec-bench "$m" --repeats 5 --out "$OUT/cost-$m.json" > "$OUT/cost-$m.txt"
done
# The drafting policy on the dev agent traces, model-free: without it (every draft verified whole) and
# with it, under a GPU-like flat table and this machine's SmolLM2 table; cross-request beside it.
TR="$SHARED/traces/agent_traces_dev.jsonl"
for t in "--flat" "--cost-table $OUT/cost-smollm2-135m.json"; do
  python -m benchmarks.replay --traces "$TR" --no-recycling --no-synthetic $t --no-policy
  python -m benchmarks.replay --traces "$TR" --no-recycling --no-synthetic $t --match-only
  python -m benchmarks.replay --traces "$TR" --no-recycling --no-synthetic $t --cross-request 65536
done > "$OUT/replay-traces.txt"
# Each model's own plain outputs of the bench tasks, replayed under its cost table: the policy (and its
# match_only ablation) beside the perfect policy and the retrieval ceiling.
for m in gemma3-270m smollm2-135m; do
  python -m benchmarks.streams --tasks "$OUT/tasks.jsonl" --model "$m" --out "$OUT/streams-$m.jsonl"
  for a in "" "--match-only"; do
    python -m benchmarks.replay --streams "$OUT/streams-$m.jsonl" --no-synthetic --cost-table "$OUT/cost-$m.json" \
      --per-task $a
  done > "$OUT/replay-streams-$m.txt"
done
python -m benchmarks.crossreq --traces "$TR" > "$OUT/crossreq-memory.txt"
# Tier 2: end to end (the patched engine when built: exact level). Each run has the A/A column beside the
# headline (plain_again: plain once more, last in every repeat; Gemma's default methods include it).
fucina bench --tasks "$OUT/tasks.jsonl" --model gemma3-270m --repeats 3 --out "$OUT/suite-gemma3"
fucina bench --tasks "$OUT/tasks.jsonl" --model smollm2-135m --methods plain,fucina,oracle,sam_only,match_only,plain_again \
  --repeats 3 --out "$OUT/suite-smollm2"
# The floor of the two lowest groups, with enough repeats to see it.
fucina bench --tasks "$OUT/tasks.jsonl" --model smollm2-135m --methods plain,fucina,plain_again --repeats 15 \
  --groups mt_bench,freeform --out "$OUT/floor-smollm2"
# Where a step's time goes (model forward vs sampler vs index vs policy vs the decoder's Python).
python -m benchmarks.overhead --tasks "$OUT/tasks.jsonl" --model gemma3-270m > "$OUT/overhead-gemma3.txt"
# The cost of exactness: stock vs GGML_LLAMAFILE=OFF vs the patched engine, side by side.
OUT="$OUT" TASKS="$OUT/tasks.jsonl" bash scripts/bench_engines.sh
# Exactness audits (not timed): the stock engine's divergence rate, and the patched engine's 100%.
FUCINA_ENGINE=stock python -m benchmarks.exactness --bench-dir "$SHARED" --prompts 24 --gen 128 > "$OUT/exactness-std.txt" 2>&1
FUCINA_ENGINE=patched python -m benchmarks.exactness --bench-dir "$SHARED" --prompts 24 --gen 128 > "$OUT/exactness-patched.txt" 2>&1
# Through HTTP: fucina serve vs llama-cpp-python's server and llama.cpp's llama-server (built from the vendored sources).
LS=$(bash scripts/build_llama_server.sh)
python -m benchmarks.http --tasks "$OUT/tasks.jsonl" --per-group 1 --repeats 3 \
  --servers fucina,fucina-plain,llama-server,ngram-mod,ngram-simple,ngram-map-k \
  --traces "$SHARED/traces/agent_traces_dev.jsonl" --trace-source swe-agent --session-steps 5 \
  --session-tokens 1500 --session-gen 16 --llama-server "$LS" --out "$OUT/http-smollm2"
python -m benchmarks.http --tasks "$OUT/tasks.jsonl" --per-group 1 --repeats 3 --servers api,fucina --out "$OUT/http-api"
# The same text on both sides (fucina on the stock engine writes what llama-server writes): every repeat a first
# sight (--fresh), then repeated requests against the servers that remember across requests.
FUCINA_ENGINE=stock python -m benchmarks.http --tasks "$OUT/tasks.jsonl" --per-group 1 --repeats 3 --fresh \
  --servers fucina,fucina-plain,llama-server,ngram-mod,ngram-simple,ngram-map-k --llama-server "$LS" \
  --out "$OUT/http-stock-fresh"
FUCINA_ENGINE=stock python -m benchmarks.http --tasks "$OUT/tasks.jsonl" --per-group 1 --repeats 3 \
  --servers fucina,fucina-xreq,fucina-plain,llama-server,ngram-mod --llama-server "$LS" --out "$OUT/http-stock-warm"
# Real models: Qwen2.5-Coder 1.5B and 0.5B (`fucina pull NAME` first; a model not pulled is skipped).
pulled() { python -c "from fucina.catalog import resolve_model; resolve_model('$1')" 2>/dev/null; }
real_model_suite() {
  local Q=$1
  fucina calibrate "$Q" --repeats 5 --out "$OUT/cost-$Q.json" > "$OUT/cost-$Q.txt"
  fucina bench --tasks "$OUT/tasks.jsonl" --model "$Q" --repeats 3 --methods plain,fucina,plain_again,oracle \
    --out "$OUT/suite-$Q"
  # The groups with little to copy, at 10 repeats: the floor is judged there, beside the A/A.
  fucina bench --tasks "$OUT/tasks.jsonl" --model "$Q" --repeats 10 --methods plain,fucina,plain_again \
    --groups qa,translation,rag,mt_bench,math_reasoning,summarization,freeform --out "$OUT/floors-$Q"
  for t in "--flat" "--cost-table $OUT/cost-$Q.json"; do
    python -m benchmarks.replay --traces "$TR" --no-recycling --no-synthetic --model "$Q" $t --budget 63
  done > "$OUT/replay-traces-$Q.txt"
  # What the drafts allow on the model's own outputs: the policy, the perfect decision, the ceiling per task.
  python -m benchmarks.streams --tasks "$OUT/tasks.jsonl" --model "$Q" --out "$OUT/streams-$Q.jsonl"
  python -m benchmarks.replay --streams "$OUT/streams-$Q.jsonl" --no-synthetic --cost-table "$OUT/cost-$Q.json" \
    --per-task --budget 63 > "$OUT/replay-streams-$Q.txt"
}
if pulled qwen2.5-coder-0.5b; then
  real_model_suite qwen2.5-coder-0.5b
fi
if pulled qwen2.5-coder-1.5b; then
  Q=qwen2.5-coder-1.5b
  real_model_suite "$Q"
  # llama.cpp's draftless modes on the copy-shaped groups, 3 tasks each, through HTTP.
  python - "$OUT/tasks.jsonl" > "$OUT/tasks-peers.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if json.loads(line)["group"] in ("copy", "code_edit", "rag_ref"):
        print(line, end="")
PY
  python -m benchmarks.http --tasks "$OUT/tasks-peers.jsonl" --model "$Q" --per-group 3 --repeats 3 \
    --servers fucina,fucina-plain,llama-server,ngram-mod,ngram-simple,ngram-map-k --llama-server "$LS" --out "$OUT/http-$Q"
  # Agents end to end: aider in its own environment (AIDER=V/bin/aider; skipped without it).
  if [ -n "${AIDER:-}" ]; then
    python -m benchmarks.aider --aider "$AIDER" --model "$Q" --servers fucina,fucina-plain,llama-server,ngram-mod \
      --llama-server "$LS" --repeats 3 --out "$OUT/aider"
  fi
fi

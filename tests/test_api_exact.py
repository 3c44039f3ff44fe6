"""Stop strings (and logprobs) through fucina.LLM on the real models, at the *exact* level: speculative ==
plain, bitwise.

Runs on the patched engine (``python -m fucina.engine build``; the README's test command
builds it), in a subprocess whose PYTHONPATH puts that build first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.probe_run import run_probe

pytestmark = pytest.mark.real_model
PROBE = Path(__file__).resolve().parent / "exact_api_probe.py"


def test_stop_strings_greedy_and_sampled_equal_plain_bitwise_on_both_models(exact_engine_env):
    results = run_probe(PROBE, "gemma3-270m,smollm2-135m", "2", "32", env=exact_engine_env)
    assert [x["model"] for x in results] == ["gemma3-270m", "smollm2-135m"]
    for x in results:
        assert x["level"] == "exact"
        assert x["runs"] >= 8 and x["identical"] == x["runs"], x["mismatches"]
        assert x["drafted"] > 20 and x["accepted"] > 0  # speculation really happened

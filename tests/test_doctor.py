"""Batch-invariance self-check and the doctor command."""

import numpy as np
import pytest

from fucina.backends.fake import FakeModel
from fucina.cli import main
from fucina.doctor import (DEFAULT_MAX_DRAFT, InvarianceReport, advice, check_batch_invariance, effective_max_draft, exact_draft_cap,
                           level_for)


class DriftAbove(FakeModel):
    """Batched rows drift once a batch has >= `threshold` rows, like a kernel switching path."""

    def __init__(self, threshold, **kw):
        super().__init__(**kw)
        self.threshold = threshold

    def forward_step_all_logits(self, tokens):
        rows = super().forward_step_all_logits(tokens)
        if len(tokens) >= self.threshold:
            rows = rows + np.float32(1e-3)
        return rows


def test_fake_backend_is_exact_everywhere():
    r = check_batch_invariance(FakeModel())
    assert r.level == "exact" and r.mismatched_rows == 0 and r.max_exact_rows == 64
    assert exact_draft_cap(r) is None and effective_max_draft(r, True) == DEFAULT_MAX_DRAFT == 63


def test_drift_above_a_batch_size_caps_drafts():
    r = check_batch_invariance(DriftAbove(8))
    assert r.level == "distribution"  # full-length drafts would cross the drift
    assert r.max_exact_rows == 7 and r.mismatched_rows > 0
    assert exact_draft_cap(r) == 6 and effective_max_draft(r, True) == 6
    assert level_for(r, 6) == "exact" and level_for(r, 7) == "distribution"


def test_drift_everywhere_is_distribution():
    r = check_batch_invariance(DriftAbove(2))
    assert r.level == "distribution" and r.max_exact_rows == 0 and exact_draft_cap(r) is None
    assert "distribution" in str(r)


@pytest.mark.real_model
def test_doctor_on_the_stock_engine_says_distribution_and_gives_the_one_command():
    import subprocess
    import sys

    from fucina.engine import env_for

    r = subprocess.run([sys.executable, "-m", "fucina.cli", "doctor"], env=env_for("stock"), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "engine: stock" in r.stdout and "level: distribution" in r.stdout
    assert "python -m fucina.engine build" in r.stdout


def test_advice_follows_the_engine_variant_not_its_description():
    drifting = InvarianceReport(ks=(2, 3), rows=5, mismatched_rows=2, argmax_flips=0, max_abs_diff=1e-3,
                                max_exact_rows=0)
    stock = advice(drifting, engine_variant="stock", exact_load=False)
    assert any("build the patched engine" in t for t in stock)
    patched = advice(drifting, engine_variant="patched", exact_load=False)
    assert not any("build the patched engine" in t for t in patched)
    assert any("--exact" in t for t in patched)
    exact = InvarianceReport(ks=(2, 3), rows=5, mismatched_rows=0, argmax_flips=0, max_abs_diff=0.0,
                             max_exact_rows=32)
    assert advice(exact, engine_variant="custom", exact_load=True)[0].startswith("speculative output is bit-identical")


def test_the_check_fits_a_small_context():
    # A 64-token model cannot hold the check's prompt and a 32-row batch: it checks what fits.
    from fucina.backends.fake import FakeModel
    from fucina.doctor import check_batch_invariance

    report = check_batch_invariance(FakeModel(context_length=64))
    assert report.max_exact_rows >= 16 and max(report.ks) + 32 <= 64

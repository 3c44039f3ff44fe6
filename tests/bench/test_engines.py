"""The cost-of-exactness benchmark's report and argument checks (no model)."""

from __future__ import annotations

import pytest

from benchmarks.engines import main, render


def _result() -> dict:
    ms = {"1": 10.0, "2": 15.0, "16": 70.0}
    inv = {"bufts": True, "max_exact_rows": 2, "mismatched": 9, "rows": 10, "max_abs_diff": 0.9, "flips": 0}
    return {"date": "2026-12-01", "machine": "test cpu, 2 cores", "models": {"m": {
        "median_ms": {"stock": ms, "patched": {k: v * 1.02 for k, v in ms.items()}},
        "invariance": {"stock": inv, "patched": {**inv, "bufts": False, "max_exact_rows": 32}},
        "logits": {"patched": {"rows": 48, "max_abs_dlogit": 0.5, "argmax_flips": 1, "max_flip_top2_gap": 0.05,
                               "greedy_runs": 2, "greedy_identical": 1,
                               "partings": [{"prompt": 1, "position": 7, "stock_top2_gap": 0.04}]}},
    }}}


def test_render_prices_every_engine_against_stock():
    text = render(_result())
    assert "| patched | no repack | 32 rows | 10.2 ms (1.02x) | 1.50 (1.02x) | 7.00 (1.02x) |" in text
    assert "| stock | standard | 2 rows | 10.0 ms | 1.50 | 7.00 |" in text
    assert "1 argmax flips (stock top-2 gap <= 0.050)" in text and "prompt 1 at token 7" in text


@pytest.mark.parametrize("argv", [["--engines", "stock,gpu"], ["--repeats", "0"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "--engines takes" in capsys.readouterr().err

"""The ``cli/`` package: defaults users see in --help, the defects a new user hit, stop strings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fucina.cli import build_parser, main
from fucina.cli.common import CHAT_SAMPLING


def _help(*argv: str) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return ""


def test_chat_samples_with_llama_cpp_defaults_and_says_so(capsys):
    args = build_parser().parse_args(["chat"])
    assert (args.temp, args.top_k, args.top_p, args.min_p) == (0.8, 40, 0.95, 0.05) == tuple(CHAT_SAMPLING.values())
    _help("chat")
    out = capsys.readouterr().out
    assert "default 0.8" in out and "default 40" in out and "default 0.95" in out and "default 0.05" in out


def test_generate_stays_greedy_by_default():
    args = build_parser().parse_args(["generate", "--prompt", "x"])
    assert args.temp == 0.0 and args.top_k == 0


def test_bench_help_names_no_workspace_path(capsys):
    _help("bench")
    out = capsys.readouterr().out
    assert "shared" not in out and "../" not in out


def test_every_subcommand_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {"generate", "chat", "serve", "bench", "calibrate", "spec-bench", "tokenize", "doctor",
                                "models", "pull"}


def test_gen_zero_is_bad_input(capsys):
    assert main(["generate", "--prompt", "x", "--gen", "0"]) == 2
    assert "--gen must be >= 1" in capsys.readouterr().err


@pytest.mark.real_model
def test_a_small_context_no_longer_trips_over_the_batch_size():
    # Was: `n_batch must be in [1, n_ctx=128], got 512`, a parameter the user never set.
    r = subprocess.run([sys.executable, "-m", "fucina.cli", "generate", "smollm2-135m", "--ctx", "128",
                        "--prompt", "Hello", "--gen", "4", "--threads", "1"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "generated: 4 tok" in r.stderr


@pytest.mark.real_model
def test_generate_stop_string_with_speculation_matches_plain(tmp_path):
    from fucina.speculative.costs import CostTable

    table = tmp_path / "free.json"
    CostTable(((2, 1.0), (32, 1.0)), "test: free verifies, so the gate keeps drafting").save(table)
    text = "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."
    base = [sys.executable, "-m", "fucina.cli", "generate", "smollm2-135m", "--chat-template", "--threads", "1",
            "--prompt", text, "--gen", "40", "--stop", "lazy"]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=300)
    spec = subprocess.run([*base, "--spec", "--cost-table", str(table)], capture_output=True, text=True, timeout=300)
    assert plain.returncode == spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout and "lazy" not in spec.stdout and "fox" in spec.stdout
    assert "stop: stop" in spec.stderr and "spec: steps=" in spec.stderr and "verifies=0 " not in spec.stderr

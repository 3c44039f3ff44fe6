"""``fucina chat``: flag errors, the non-interactive --prompt mode, and the REPL in a real pty."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fucina.cli import main
from fucina.speculative.costs import CostTable

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


# Real-model runs use --threads 1: on a busy 2-core box llama.cpp's spinning 2-thread pool can run
# 10-30x slower, and these tests check behaviour, not speed.


@pytest.fixture
def env(tmp_path):
    """A private cache (cost table, readline history) and a free-verify cost table file."""
    table = tmp_path / "cheap.json"
    CostTable(((2, 1.0), (32, 1.0)), "test: free verifies").save(table)
    e = dict(os.environ, FUCINA_CACHE=str(tmp_path / "cache"),
             PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return e, str(table)


@pytest.mark.parametrize("argv", [
    ["chat", "--gen", "0"],
    ["chat", "--spec", "--stop", "\n\n"],  # text stops need plain decoding
    ["chat", "--stop-id", "-1"],
    ["chat", "--temp", "hot"],
    ["chat", "--bogus"],
    ["chat", "--spec-ref", "/nonexistent/ref.txt"],
    ["chat", "no-such-model", "--prompt", "hi"],
])
def test_bad_flags_are_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def test_stop_with_spec_explains_why(capsys):
    assert main(["chat", "--spec", "--stop", "END"]) == 2
    assert "one-random-draw-per-committed-token" in capsys.readouterr().err


@pytest.mark.real_model
def test_model_without_template_is_one_line_exit_2(env):
    e, _ = env
    r = subprocess.run([sys.executable, "-m", "fucina.cli", "chat", "gemma3-270m", "--prompt", "hi"],
                       capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no chat template" in r.stderr


@pytest.mark.slow
@pytest.mark.real_model
def test_prompt_mode_answers_each_turn_and_reports_stats(env):
    e, table = env
    r = subprocess.run(
        [sys.executable, "-m", "fucina.cli", "chat", "smollm2-135m", "--threads", "1", "--spec",
         "--cost-table", table, "--gen", "32",
         "--prompt", "What is the capital of France?", "--prompt", "And the capital of Italy?"],
        capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    answers = r.stdout.strip().splitlines()
    assert len(answers) == 2 and "Paris" in answers[0] and "Rome" in answers[1]
    assert r.stderr.count("generated:") == 2  # one timing line per turn
    assert "spec: steps=" in r.stderr and "spec sources: conversation" in r.stderr


@pytest.mark.slow
@pytest.mark.real_model
def test_repl_in_a_pty_answers_stats_survives_ctrl_c_and_exits_on_ctrl_d(env, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    e, table = env
    ref = tmp_path / "ref.txt"
    ref.write_text("The Eiffel Tower is in Paris.")
    child = pexpect.spawn(sys.executable, ["-m", "fucina.cli", "chat", "smollm2-135m", "--threads", "1",
                                           "--spec", "--cost-table", table, "--gen", "600"],
                          env=e, encoding="utf-8", timeout=180, dimensions=(40, 200))
    try:
        child.expect_exact("> ")
        child.sendline("What is the capital of France?")
        child.expect_exact("What is the capital of France?")  # the pty's echo
        child.expect("Paris")
        child.expect_exact("> ")

        child.sendline("/stats")
        child.expect(r"spec: steps=\d+ committed=\d+")
        child.expect(r"spec sources: conversation \d+/\d+")
        child.expect_exact("> ")

        child.sendline("/ref " + str(ref))
        child.expect_exact("(reference ref0 added)")
        child.expect_exact("> ")

        # Ctrl-C while the answer streams: back to the prompt, session alive.
        child.sendline("Write a very long story about a dragon who bakes bread, with many chapters.")
        child.expect_exact("many chapters.")
        child.expect(r"\w+\W+\w+\W+\w+")  # the answer has started
        child.sendintr()
        child.expect_exact("[interrupted]")
        child.expect_exact("> ")
        child.sendline("/stats")
        child.expect("stop: interrupted")
        child.expect_exact("> ")

        child.sendline("What is the capital of Italy?")
        child.expect_exact("What is the capital of Italy?")
        child.expect("Rome")
        child.expect_exact("> ")

        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    history = (tmp_path / "cache" / "chat_history").read_text()
    assert "What is the capital of Italy?" in history  # readline history persisted

"""CLI: bad input is one line + exit 2; the main job works on the default model."""

import subprocess
import sys

import pytest

from fucina.cli import main


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "fucina.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "argv",
    [
        ["generate"],  # no prompt
        ["generate", "--prompt", "x", "--gen", "-3"],
        ["generate", "--prompt", "x", "--temp", "hot"],
        ["generate", "--prompt", "x", "--top-p", "1.5"],
        ["generate", "no-such-model", "--prompt", "x"],
        ["generate", "--prompt-file", "/nonexistent/file.txt"],
        ["frobnicate"],
    ],
)
def test_bad_input_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def test_non_utf8_prompt_file(tmp_path, capsys):
    f = tmp_path / "latin1.txt"
    f.write_bytes("caf\xe9".encode("latin-1"))
    assert main(["generate", "--prompt-file", str(f)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.real_model
def test_generate_prints_text_from_default_model():
    r = run_cli("generate", "--prompt", "The capital of France is", "--gen", "16")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 5
    assert "generated: 16 tok" in r.stderr


@pytest.mark.real_model
def test_tokenize_oracle(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("Hello world")
    r = run_cli("tokenize", str(f))
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.split()]
    assert ids[0] == 2 and len(ids) == 3  # BOS + two words on Gemma's tokenizer
    bad = tmp_path / "b.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    r = run_cli("tokenize", str(bad))
    assert r.returncode == 2 and "not UTF-8" in r.stderr


@pytest.mark.real_model
@pytest.mark.parametrize("command", ["calibrate", "spec-bench"])
def test_calibrate_measures_and_caches_a_table(command, tmp_path, capsys):
    out = tmp_path / "table.json"
    assert main([command, "smollm2-135m", "--max-n", "4", "--repeats", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "break-even" in text and "measured" in text
    # The old name still works for one release, and says what it is now called.
    assert ("is now `fucina calibrate`" in captured.err) == (command == "spec-bench")
    from fucina.speculative.costs import CostTable

    t = CostTable.load(out)
    assert [n for n, _ in t.points] == [2, 3, 4] and all(c >= 1.0 for _, c in t.points)


@pytest.mark.real_model
def test_generate_spec_prints_stats_and_level():
    prompt = "one two three four five six seven eight nine ten. " * 6
    a = run_cli("generate", "smollm2-135m", "--prompt", prompt, "--gen", "40")
    b = run_cli("generate", "smollm2-135m", "--prompt", prompt, "--gen", "40", "--spec", "--exact")
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    assert "spec: steps=" in b.stderr and "% acc)" in b.stderr and "spec sources: conversation" in b.stderr
    assert "level=" in b.stderr
    assert len(b.stdout) > 20


def test_generate_rejects_too_many_refs(tmp_path, capsys):
    f = tmp_path / "r.txt"
    f.write_text("ref")
    argv = ["generate", "--prompt", "x"] + sum([["--spec-ref", str(f)] for _ in range(9)], [])
    assert main(argv) == 2
    assert "at most 8" in capsys.readouterr().err

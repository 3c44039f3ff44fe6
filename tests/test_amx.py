"""No load path puts weights in llama.cpp's AMX buffer type where the CPU has AMX (llama.cpp #20824).

The machines these tests run on mostly have no AMX, so the one CPU check (:func:`fucina.cpu.cpu_has_amx`)
is faked to "AMX present" and the engine to a stock one (whose default load would repack); then every
load path must hand llama.cpp model parameters with ``use_extra_bufts`` off. The parameters are read
where they reach llama.cpp — ``llama_model_load_from_file`` — which is replaced by a recorder that stops
the load there, so no weights are read and nothing can crash.
"""

from __future__ import annotations

import importlib
import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest

import fucina.cpu
from fucina import engine_selection
from fucina.cli import main
from fucina.errors import InvalidOption

#: The module (``fucina.engine`` re-exports its ``build`` function under the same name).
engine_build = importlib.import_module("fucina.engine.build")


class LoadStopped(BaseException):
    """Raised by the recorder in place of a model load (a BaseException: no handler on the way swallows it)."""


@pytest.fixture
def loads(monkeypatch):
    """Every weight load llama.cpp is asked for, as {"extra_bufts": ..., "by": ...}; each one stops there."""
    import llama_cpp
    import llama_cpp.llama_cpp as low

    seen: list[dict] = []

    def recorder(by: str, real):
        def load(path, params):
            if params.vocab_only:  # a tokenizer: no weights, no buffer types
                return real(path, params)
            seen.append({"extra_bufts": bool(params.use_extra_bufts), "by": by})
            raise LoadStopped(by)

        return load

    # fucina's backend calls it on the package, llama-cpp-python's Llama on the low-level module.
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file",
                        recorder("fucina", llama_cpp.llama_model_load_from_file))
    monkeypatch.setattr(low, "llama_model_load_from_file", recorder("Llama", low.llama_model_load_from_file))
    return seen


@pytest.fixture
def amx_stock(monkeypatch):
    """A CPU with AMX, running a stock engine (whose default load would use the extra buffer types)."""
    import fucina.backends.llama_cpp as backend

    monkeypatch.setattr(fucina.cpu, "cpu_has_amx", lambda: True)
    monkeypatch.setattr(fucina.cpu, "_told", False)
    monkeypatch.setattr(engine_selection, "exact_by_default", lambda: False)
    monkeypatch.setattr(backend, "exact_by_default", lambda: False)


def _only_load(loads: list[dict], by: str = "fucina") -> bool:
    assert len(loads) == 1 and loads[0]["by"] == by, loads
    return loads[0]["extra_bufts"]


# -- the check and the default ----------------------------------------------------------------------

SAPPHIRE_RAPIDS = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
                   "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 avx512_fp16 amx_tile "
                   "amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16\n"


def test_the_cpu_check_reads_the_amx_flags(monkeypatch):
    assert {"amx_int8", "amx_tile", "avx512_vnni"} <= fucina.cpu.flags_in(SAPPHIRE_RAPIDS)
    assert not fucina.cpu.flags_in(ZEN4) & set(fucina.cpu.AMX_FLAGS)
    assert fucina.cpu.flags_in("") == frozenset()
    monkeypatch.setattr(fucina.cpu, "cpu_flags", lambda: fucina.cpu.flags_in(SAPPHIRE_RAPIDS))
    assert fucina.cpu.cpu_has_amx()
    monkeypatch.setattr(fucina.cpu, "cpu_flags", lambda: fucina.cpu.flags_in(ZEN4))
    assert not fucina.cpu.cpu_has_amx()


def test_the_cpu_check_agrees_with_this_machine():
    try:
        listed = "amx_" in Path("/proc/cpuinfo").read_text()
    except OSError:
        listed = False
    assert fucina.cpu.cpu_has_amx() is listed


def test_the_default_is_off_on_amx_and_said_once_with_the_reason(monkeypatch, caplog):
    monkeypatch.setattr(fucina.cpu, "_told", False)
    monkeypatch.setattr(fucina.cpu, "cpu_has_amx", lambda: False)
    assert fucina.cpu.default_extra_bufts(exact_engine=False) is True
    assert fucina.cpu.default_extra_bufts(exact_engine=True) is False
    monkeypatch.setattr(fucina.cpu, "cpu_has_amx", lambda: True)
    with caplog.at_level(logging.WARNING, logger="fucina.load"):
        assert fucina.cpu.default_extra_bufts(exact_engine=False) is False
        assert fucina.cpu.default_extra_bufts(exact_engine=False) is False
    said = [r.getMessage() for r in caplog.records if r.name == "fucina.load"]
    assert len(said) == 1 and "AMX" in said[0] and "#20824" in said[0] and "--repack" in said[0]


# -- every load path, on a faked AMX CPU with a stock engine ---------------------------------------

@pytest.mark.real_model
@pytest.mark.parametrize("kwargs", [{}, {"exact": False}, {"speculative": False}])
def test_llm_loads_without_extra_bufts(amx_stock, loads, kwargs):
    from fucina.api import LLM

    with pytest.raises(LoadStopped):
        LLM("gemma3-270m", **kwargs)
    assert _only_load(loads) is False


@pytest.mark.real_model
def test_an_explicit_choice_still_wins(amx_stock, loads):
    from fucina.api import LLM

    with pytest.raises(LoadStopped):
        LLM("gemma3-270m", repack=True)
    assert _only_load(loads) is True
    with pytest.raises(InvalidOption) as e:
        LLM("gemma3-270m", exact=True, repack=True)
    assert e.value.param == "repack"
    loads.clear()
    with pytest.raises(LoadStopped):
        main(["generate", "--prompt", "x", "--gen", "1", "--repack"])
    assert _only_load(loads) is True


@pytest.mark.real_model
@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "The capital of France is", "--gen", "16", "--spec"],
    ["generate", "--prompt", "The capital of France is", "--gen", "16"],
    ["generate", "--prompt", "x", "--no-exact"],
    ["chat", "--spec"],
    ["serve", "smollm2-135m", "--port", "0"],
    ["doctor"],
    ["calibrate", "--max-n", "4"],
])
def test_cli_commands_load_without_extra_bufts(amx_stock, loads, argv):
    with pytest.raises(LoadStopped):
        main(argv)
    assert _only_load(loads) is False


def test_exact_and_repack_together_are_one_line_exit_2(capsys):
    assert main(["generate", "--prompt", "x", "--exact", "--repack"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--repack" in err and "\n" not in err


def _tasks(tmp_path: Path) -> Path:
    f = tmp_path / "tasks.jsonl"
    f.write_text(json.dumps({"id": "t", "kind": "k", "group": "g", "prompt": "The quick brown fox", "references": [], "gen": 4,
                             "temperature": 0}) + "\n")
    return f


@pytest.mark.real_model
def test_bench_methods_load_without_extra_bufts(amx_stock, loads, tmp_path):
    with pytest.raises(LoadStopped):
        main(["bench", "--tasks", str(_tasks(tmp_path)), "--model", "gemma3-270m", "--methods", "plain,fucina",
              "--repeats", "1", "--out", str(tmp_path / "out")])
    assert _only_load(loads) is False


def test_the_peer_gets_our_model_parameters(amx_stock, loads):
    """llama-cpp-python's Llama takes no use_extra_bufts; the peer still hands llama.cpp ours."""
    from fucina.bench.suite import LlamaPeer
    from fucina.catalog import resolve_model

    class Ours:  # what for_model reads of a loaded LlamaModel
        path = resolve_model("gemma3-270m")
        context_length, n_threads = 512, 1

        class options:
            n_batch, use_extra_bufts = 512, False

    with pytest.raises(LoadStopped):
        LlamaPeer.for_model(Ours())
    assert _only_load(loads, by="Llama") is False
    import llama_cpp.llama_cpp as low

    assert low.llama_model_default_params().use_extra_bufts  # the defaults are left as they were


def test_bench_engines_stock_load_without_extra_bufts(amx_stock, loads):
    from benchmarks.engines import _load

    with pytest.raises(LoadStopped):
        _load("gemma3-270m", "stock")
    assert _only_load(loads) is False


def test_llama_server_comparisons_load_without_repacking(amx_stock):
    from benchmarks.http import server_command

    cmd = server_command("ngram-mod", "m", Path("m.gguf"), ctx=1024, threads=2, port=1, llama_server="/bin/ls")
    assert "--no-repack" in cmd
    with pytest.raises(SystemExit, match="AMX"):
        server_command("lcp", "m", Path("m.gguf"), ctx=1024, threads=2, port=1, llama_server=None)


def test_doctor_names_the_choice(amx_stock):
    from fucina.doctor import AMX_ADVICE, InvarianceReport, advice, engine_info

    assert "AMX" in engine_info()["engine"]
    report = InvarianceReport((2,), 2, 0, 0, 0.0, 32)
    assert AMX_ADVICE in advice(report, engine_variant="patched", exact_load=True, amx_cpu=True)
    assert AMX_ADVICE not in advice(report, engine_variant="patched", exact_load=True, amx_cpu=False)


# -- the engine build leaves AMX out ------------------------------------------------------------------

def _macros(compiler: str, lang: str, flags: list[str]) -> str:
    r = subprocess.run([compiler, *flags, "-march=sapphirerapids", "-dM", "-E", "-x", lang, "/dev/null"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{compiler} cannot target sapphirerapids: {r.stderr.strip()[:200]}")
    return r.stdout


def _flag_value(args: tuple[str, ...], name: str) -> list[str]:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"-D{name}=")]
    assert len(values) == 1, args
    return values[0].split()


@pytest.mark.parametrize("variant", engine_build.VARIANTS)
def test_the_build_recipe_compiles_no_amx_even_with_march_native(variant):
    """GGML_NATIVE compiles with -march=native; on an AMX CPU that defines __AMX_INT8__, on which
    ggml-cpu registers the AMX buffer type. The recipe's flags must undefine it there."""
    args = engine_build.cmake_args(variant, "x86_64")
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)
    for compiler, lang, var in (("gcc", "c", "CMAKE_C_FLAGS"), ("g++", "c++", "CMAKE_CXX_FLAGS")):
        if shutil.which(compiler) is None:
            pytest.skip(f"no {compiler}")
        assert "__AMX_INT8__" in _macros(compiler, lang, [])  # what -march alone gives an AMX CPU
        macros = _macros(compiler, lang, _flag_value(args, var))
        assert "__AMX_INT8__" not in macros and "__AMX_TILE__" not in macros
        assert "__AVX512VNNI__" in macros  # nothing else of the CPU is given up
    assert not any("amx" in a for a in engine_build.cmake_args(variant, "aarch64") if "FLAGS" in a)


def test_build_passes_the_recipe_and_the_manifest_records_it(tmp_path, monkeypatch):
    import shlex

    monkeypatch.setenv("FUCINA_ENGINE_CACHE", str(tmp_path))
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_AMX_INT8=ON")  # a user's CMAKE_ARGS must not bring AMX back
    seen = {}

    def fake_run(cmd, *, env, step, log):
        seen["cmake_args"] = shlex.split(env["CMAKE_ARGS"])
        target = Path(cmd[cmd.index("--target") + 1])
        (target / "llama_cpp").mkdir(parents=True)
        (target / "llama_cpp" / "__init__.py").write_text("")

    monkeypatch.setattr(engine_build, "_run", fake_run)
    d = engine_build.build("no-llamafile", progress=lambda line: None)
    assert seen["cmake_args"] == list(engine_build.cmake_args("no-llamafile"))
    manifest = json.loads((d / engine_selection.MANIFEST).read_text())
    assert manifest["cmake_args"] == seen["cmake_args"] and engine_build.engine_ready("no-llamafile")
    del manifest["cmake_args"]  # a build of the recipe before AMX was left out
    (d / engine_selection.MANIFEST).write_text(json.dumps(manifest))
    assert not engine_build.engine_ready("no-llamafile")


def test_the_engine_line_says_whether_amx_was_left_out():
    new = engine_selection.ActiveEngine("patched", None, "abc", engine_build.cmake_args("patched"))
    old = engine_selection.ActiveEngine("patched", None, "abc")
    assert "AMX kernels left out" in new.describe() and new.amx_left_out
    assert "rebuild" in old.describe() and not old.amx_left_out
    assert engine_selection.ActiveEngine("stock", None).describe() == "stock"

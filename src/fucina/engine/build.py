"""Build an engine variant of the pinned llama-cpp-python into fucina's cache.

Two variants, each in its own directory beside the user's standard install (pip's wheel cache ignores
``CMAKE_ARGS``, so every build is ``--no-cache-dir``):

* ``patched`` (the default, used by fucina whenever it is present): the pinned sdist with
  :data:`fucina.engine.patches.PATCHES` applied to its vendored llama.cpp, built with the standard
  options (llamafile sgemm and native CPU flags on). Exact at full speed.
* ``no-llamafile``: the unmodified sdist with ``-DGGML_LLAMAFILE=OFF``, the older exact recipe; kept
  so BENCHMARKS.md can price it side by side.

Both leave ggml-cpu's AMX kernels out (:func:`cmake_args`): they are another kernel for batched rows
(not batch-invariant), and their buffer type segfaults in batched matmuls (llama.cpp #20824). (The
patch set's own AMX microtile, ``kernels/tiled_amx.cpp``, is compiled with function-level target
attributes and chosen at run time, so these flags leave it in.) The
manifest records the CMake arguments, and a build made with other ones counts as stale.

A build is atomic: it goes to ``<dir>.tmp`` and is renamed into place only when pip succeeded and the
manifest is written, so a failed or interrupted build leaves the previous state.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from fucina.engine_selection import ENGINE_VERSION, MANIFEST, engine_dir, read_manifest
from fucina.engine.patches import apply_patches, patch_set_id
from fucina.errors import FucinaError

VARIANTS = ("patched", "no-llamafile")
SDIST = f"llama-cpp-python=={ENGINE_VERSION}"
#: The compiler's own switches for AMX. ``GGML_NATIVE`` (on by default) compiles ggml-cpu with
#: ``-march=native``, which on an AMX CPU defines ``__AMX_INT8__`` whatever ``GGML_AMX_INT8`` says, and
#: ggml-cpu registers the AMX buffer type on that macro alone. An explicit ``-mno-*`` wins over
#: ``-march`` in GCC and Clang whatever their order, so these in ``CMAKE_C(XX)_FLAGS`` keep it out.
NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
_X86 = ("x86_64", "amd64", "i386", "i686", "x86")


def cmake_args(variant: str, machine: str | None = None) -> tuple[str, ...]:
    """The CMake arguments a ``variant`` build passes (``CMAKE_ARGS``), on ``machine`` (default: this one).

    >>> cmake_args("patched", "x86_64")[:3]
    ('-DGGML_AMX_TILE=OFF', '-DGGML_AMX_INT8=OFF', '-DGGML_AMX_BF16=OFF')
    """
    args = ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    if (machine or platform.machine()).lower() in _X86:  # other compilers' targets have no such flags
        flags = " ".join(NO_AMX_FLAGS)
        args += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    if variant == "no-llamafile":
        args.append("-DGGML_LLAMAFILE=OFF")
    return tuple(args)


class EngineBuildError(FucinaError):
    """Downloading, patching or compiling the engine failed (the message says which step)."""


def engine_ready(variant: str = "patched") -> bool:
    """True when ``variant`` is built for this version with today's recipe (CMake arguments and, patched,
    patch set); a build from an older recipe is stale."""
    m = read_manifest(engine_dir(variant))
    if m is None or m.get("version") != ENGINE_VERSION or m.get("variant") != variant:
        return False
    if m.get("cmake_args") != list(cmake_args(variant)):
        return False
    return variant != "patched" or m.get("patch_set") == patch_set_id()


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run(cmd: list[str], *, env: dict[str, str] | None, step: str, log: Path) -> None:
    _say(f"fucina.engine: {step}: {' '.join(cmd)}  (log: {log})")
    with log.open("ab") as out:
        r = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise EngineBuildError(f"{step} failed (exit {r.returncode}); last lines of {log}:\n{tail}")


def _source_tree(work: Path, log: Path) -> Path:
    """Download the pinned sdist and unpack it; returns the llama-cpp-python source directory."""
    dl = work / "sdist"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(dl)],
         env=None, step="download the pinned sdist", log=log)
    archives = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if len(archives) != 1:
        raise EngineBuildError(f"expected one llama_cpp_python sdist in {dl}, found {[a.name for a in archives]}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(work / "src", filter="data")
    trees = [p for p in (work / "src").iterdir() if p.is_dir()]
    if len(trees) != 1:
        raise EngineBuildError(f"unexpected sdist layout in {work / 'src'}")
    return trees[0]


def build(variant: str = "patched", *, force: bool = False, progress: Callable[[str], None] = _say) -> Path:
    """Build ``variant`` unless it is already there; returns its directory. About 10 minutes on 2 cores."""
    if variant not in VARIANTS:
        raise EngineBuildError(f"unknown engine variant {variant!r}; choose one of {', '.join(VARIANTS)}",
                               param="variant")
    target = engine_dir(variant)
    if engine_ready(variant) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log = target.with_name(target.name + ".build.log")
    log.write_text("")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fucina-engine-") as work_s:
        work = Path(work_s)
        env = dict(os.environ)
        args = cmake_args(variant)
        env["CMAKE_ARGS"] = shlex.join(args)  # scikit-build-core splits it with shlex
        patch_set = ""
        if variant == "patched":
            tree = _source_tree(work, log)
            patch_set = patch_set_id()  # of the patches applied now, not of whatever is loaded later
            for line in apply_patches(tree / "vendor" / "llama.cpp"):
                progress(f"fucina.engine: patched {line}")
            source = str(tree)
        else:
            source = SDIST
        progress(f"fucina.engine: compiling the {variant} engine (about 10 minutes on 2 cores, once) "
                 f"with CMAKE_ARGS={env['CMAKE_ARGS']}")
        _run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--target", str(tmp), source],
             env=env, step=f"compile the {variant} engine", log=log)
    manifest = {
        "variant": variant,
        "version": ENGINE_VERSION,
        "patch_set": patch_set,
        "cmake_args": list(args),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": platform.machine(),
        "build_seconds": round(time.monotonic() - started),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    progress(f"fucina.engine: {variant} engine ready at {target}")
    return target

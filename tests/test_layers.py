"""The import-linter contracts in pyproject.toml hold, and they catch a backend import in speculative/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(src: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` (the console script's entry point, run by this interpreter) over ``src``."""
    # grimp finds `fucina` on sys.path: putting ``src`` first makes it analyse exactly that tree.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    code = "import sys; from importlinter.cli import lint_imports_command as m; sys.argv[0] = 'lint-imports'; m()"
    return subprocess.run([sys.executable, "-c", code, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_layer_contracts_hold():
    r = _lint_imports(ROOT / "src")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def lint_imports_with(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess:
    """``lint-imports`` over a copy of ``src/fucina`` in ``tmp_path`` where ``module`` (a path below
    ``fucina/``) ends with the import statement ``line``."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "fucina", src / "fucina", ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "fucina" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    return _lint_imports(src)


def test_a_backend_import_in_speculative_breaks_a_contract(tmp_path):
    r = lint_imports_with(tmp_path, "speculative/decoder.py", "from fucina.backends import fake as _smuggled")
    assert r.returncode != 0, r.stdout[-3000:]
    assert "The speculative layers, plain decoding and the sampler import no backend BROKEN" in r.stdout
    assert "fucina.speculative.decoder -> fucina.backends.fake" in r.stdout

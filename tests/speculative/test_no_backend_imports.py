"""The speculative layers import no backend: checked on the source and in a clean interpreter."""

import ast
import pathlib
import subprocess
import sys

SPEC = pathlib.Path(__file__).resolve().parents[2] / "src" / "fucina" / "speculative"
FORBIDDEN = ("llama_cpp", "fucina.backends")


def test_no_backend_import_statements():
    for path in SPEC.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for n in names:
                assert not n.startswith(FORBIDDEN), f"{path.name} imports {n}"


def test_importing_speculative_loads_no_backend():
    mods = [f"fucina.speculative.{p.stem}" for p in SPEC.glob("*.py") if p.stem != "__init__"]
    code = (
        "import sys, importlib\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.startswith(('llama_cpp', 'fucina.backends'))]\n"
        "assert not bad, bad\n"
    )
    src = str(SPEC.parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})

"""The server's internal layering contract (pyproject.toml) holds and catches an upward import."""

from __future__ import annotations

import shutil

from tests.test_layers import ROOT, _lint_imports


def test_an_import_of_the_routes_from_the_translation_breaks_the_server_contract(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "fucina", src / "fucina", ignore=shutil.ignore_patterns("__pycache__"))
    translate = src / "fucina" / "server" / "translate.py"
    translate.write_text(translate.read_text() + "\nfrom fucina.server import routes as _upward  # noqa\n")
    r = _lint_imports(src)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "BROKEN" in r.stdout and "fucina.server.translate -> fucina.server.routes" in r.stdout, r.stdout[-3000:]

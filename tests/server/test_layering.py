"""The server's internal layering contract (pyproject.toml) holds and catches an upward import."""

from __future__ import annotations

from tests.test_layers import lint_imports_with


def test_an_import_of_the_routes_from_the_translation_breaks_the_server_contract(tmp_path):
    r = lint_imports_with(tmp_path, "server/translate.py", "from fucina.server import routes as _upward")
    assert r.returncode != 0, r.stdout[-3000:]
    assert "BROKEN" in r.stdout and "fucina.server.translate -> fucina.server.routes" in r.stdout, r.stdout[-3000:]

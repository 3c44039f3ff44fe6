"""The module paths the README documented before the redesign still import, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

from fucina.speculative.decoder import SpeculativeDecoder
from fucina.speculative.index import SpeculationIndex


@pytest.mark.parametrize(("old", "name", "new"), [
    ("fucina.speculative.core", "SpeculativeDecoder", SpeculativeDecoder),
    ("fucina.speculative.cascade", "SpeculationIndex", SpeculationIndex),
])
def test_an_old_module_path_warns_and_gives_the_same_class(old, name, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.") + " is now"):
        module = importlib.import_module(old)
    assert getattr(module, name) is new

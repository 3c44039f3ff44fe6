"""Deprecated: the index moved to :mod:`fucina.speculative.index` (this alias goes in the next release).

The README documented ``fucina.speculative.cascade.SpeculationIndex``, so the old path still imports.
"""

from __future__ import annotations

import warnings

from fucina.speculative.index import CascadeOptions, SpeculationIndex

__all__ = ["CascadeOptions", "SpeculationIndex"]

warnings.warn("fucina.speculative.cascade is now fucina.speculative.index", DeprecationWarning, stacklevel=2)

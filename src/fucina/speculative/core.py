"""Deprecated: the decoder moved to :mod:`fucina.speculative.decoder` (this alias goes in the next release).

The README documented ``fucina.speculative.core.SpeculativeDecoder``, so the old path still imports.
"""

from __future__ import annotations

import warnings

from fucina.speculative.decoder import SpecOptions, SpecStats, SpeculativeDecoder

__all__ = ["SpecOptions", "SpecStats", "SpeculativeDecoder"]

warnings.warn("fucina.speculative.core is now fucina.speculative.decoder", DeprecationWarning, stacklevel=2)

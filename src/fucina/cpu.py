"""What this CPU has that changes how fucina loads a model: today, only whether it has AMX.

A support module beside the backends (it imports nothing of llama.cpp). The one check the load paths
ask is :func:`cpu_has_amx`; tests replace it (``monkeypatch.setattr(fucina.cpu, "cpu_has_amx", ...)``)
to show every load path on a machine without AMX, so callers look it up through the module
(``cpu.cpu_has_amx()``), never by importing the function.

Why it matters: on an Intel Xeon with AMX (Sapphire Rapids and later), llama.cpp built for the
machine puts the weights in its AMX buffer type whenever a model is loaded *with extra buffer types*
(llama.cpp's weight repacking), and the first batched matmul segfaults there (upstream llama.cpp
#20824). Loading without extra buffer types keeps every weight in the plain CPU buffer, which works.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

__all__ = ["AMX_FLAGS", "AMX_REASON", "cpu_flags", "cpu_has_amx", "default_extra_bufts", "flags_in"]

#: The ``/proc/cpuinfo`` flags of Intel's Advanced Matrix Extensions.
AMX_FLAGS = ("amx_int8", "amx_tile", "amx_bf16")
#: Said wherever the AMX guard changes a default.
AMX_REASON = ("this CPU has AMX, and llama.cpp's AMX buffer type segfaults in batched matmuls "
              "(llama.cpp #20824)")

log = logging.getLogger("fucina.load")
_told = False


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (empty where there is none to read)."""
    try:
        return flags_in(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return frozenset()


def flags_in(cpuinfo: str) -> frozenset[str]:
    """The first ``flags`` (x86) or ``Features`` (Arm) line of a ``/proc/cpuinfo`` text, as a set."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_has_amx() -> bool:
    """True when the CPU lists any AMX flag (Linux; elsewhere False: no ``/proc/cpuinfo`` to read)."""
    return any(f in cpu_flags() for f in AMX_FLAGS)


def default_extra_bufts(*, exact_engine: bool) -> bool:
    """Whether a load that did not choose loads with llama.cpp's extra buffer types (weight repacking).

    Off on the batch-invariant engine (``exact_engine``: repacking takes another kernel for batches),
    off where the CPU has AMX (:data:`AMX_REASON`; said once per process on the ``fucina.load``
    logger, which reaches stderr when nothing configured logging), on otherwise. An explicit
    choice (``LlamaOptions(use_extra_bufts=...)``, ``LLM(repack=...)``, ``--repack``) never asks.
    """
    if exact_engine:
        return False
    if cpu_has_amx():
        _tell_once()
        return False
    return True


def _tell_once() -> None:
    global _told
    if _told:
        return
    _told = True
    log.warning("fucina: loading without extra buffer types (no weight repacking): %s; "
                "--repack (LLM(repack=True)) overrides", AMX_REASON)

"""How long a context a model is loaded with when the caller names none.

The default is the context the model was trained on (GGUF ``<arch>.context_length``), capped by what
this machine can hold: a context of n tokens costs n times the KV cache's bytes per token (every
layer's K and V rows, f16) plus the attention scratch llama.cpp sizes for it (one f32 score per head,
batch row and cached token, since fucina runs without flash attention), and the caller's own reserve
(the prefix snapshots :class:`fucina.LLM` keeps, at most :data:`RESERVE_SHARE` of the memory left for
both) comes on top. All of it must fit in a fraction
(:data:`MEMORY_FRACTION`) of the memory the kernel says is available (``MemAvailable``) once the
weights are counted, so the machine keeps room for everything else. Past :data:`MAX_AUTO_CTX` the
default stops growing whatever the memory (a prompt that long takes hours to evaluate on a CPU); an
explicit size (``n_ctx=``, ``--ctx``) is always used as given.

Pure arithmetic over a few numbers (:func:`choose_context`), so it is tested with made-up ones;
:func:`mem_available_bytes` is the one place that reads the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fucina.errors import InvalidOption

__all__ = ["ContextChoice", "KvLayout", "MAX_AUTO_CTX", "MEMORY_FRACTION", "MIN_AUTO_CTX", "RESERVE_SHARE",
           "choose_context", "mem_available_bytes", "requested_context"]

#: The largest context chosen by default (an explicit size may be larger).
MAX_AUTO_CTX = 131072
#: The smallest context chosen by default when memory is short (a model trained on less keeps its own).
MIN_AUTO_CTX = 512
#: The share of the available memory a default context may take.
MEMORY_FRACTION = 0.5
#: A memory-capped context is rounded down to a multiple of this (llama.cpp pads the KV cache to 256).
CTX_STEP = 256
#: The most a caller's reserve may take of the memory a default context and the reserve share: on a
#: machine with little memory to spare the reserve shrinks, not the context to nothing.
RESERVE_SHARE = 0.25
#: The context used when the model does not say what it was trained on.
FALLBACK_CTX = 4096

Reason = Literal["requested", "trained", "memory", "cap", "unknown"]


@dataclass(frozen=True)
class KvLayout:
    """What one token of context costs in memory, from the model's metadata.

    Args:
        n_layer: transformer blocks (each holds K and V rows for every cached token).
        n_embd_k_gqa: K values per token and layer (key head size x KV heads).
        n_embd_v_gqa: V values per token and layer.
        n_head: attention (query) heads: the scratch holds one score per head, batch row and token.
        bytes_per_element: of the K and V cache (f16, llama.cpp's default: 2).
    """

    n_layer: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    n_head: int = 0
    bytes_per_element: int = 2

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd_k_gqa", "n_embd_v_gqa", "n_head", "bytes_per_element"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidOption(f"{name} must be a whole number >= 0, got {value!r}", param=name)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V cache one token of context takes across all layers."""
        return self.n_layer * (self.n_embd_k_gqa + self.n_embd_v_gqa) * self.bytes_per_element

    def scratch_bytes_per_token(self, n_batch: int) -> int:
        """Bytes of attention scratch per token of context for batches of ``n_batch`` rows (f32 scores)."""
        return self.n_head * n_batch * 4


@dataclass(frozen=True)
class ContextChoice:
    """The context a model was loaded with, and why.

    ``reason``: ``"requested"`` (the caller named it), ``"trained"`` (the model's trained context
    fits), ``"memory"`` (capped by this machine's memory), ``"cap"`` (capped at :data:`MAX_AUTO_CTX`)
    or ``"unknown"`` (the model names no trained context: :data:`FALLBACK_CTX`).
    """

    n_ctx: int
    reason: Reason
    #: The model's trained context (0: the model does not say).
    trained: int
    #: Tokens of context the memory budget holds (None: not measured).
    memory_limit: int | None = None
    #: Bytes one token of context costs (KV cache and attention scratch; 0: not known).
    bytes_per_token: int = 0
    #: Bytes available for the context (None: not measured).
    budget_bytes: int | None = None
    #: Bytes set aside for the caller's reserve, at most what it asked (None: not measured).
    reserve_bytes: int | None = None

    def describe(self) -> str:
        """One line for a log: the size and why, e.g. ``8192 tokens (the model's trained context)``."""
        size = f"{self.n_ctx} tokens"
        cost = f"; {_mib(self.n_ctx * self.bytes_per_token)} of KV cache and scratch" if self.bytes_per_token else ""
        trained = f"the model's trained context is {self.trained}" if self.trained else "no trained context known"
        if self.reason == "requested":
            return f"{size} (as requested; {trained}{cost})"
        if self.reason == "trained":
            return f"{size} (the model's trained context{cost})"
        if self.reason == "memory":
            budget = f"{_mib(self.budget_bytes)} of memory it may use" if self.budget_bytes is not None else "memory"
            return f"{size} (capped by this machine's memory: {budget}; {trained}{cost}; --ctx overrides)"
        if self.reason == "cap":
            return f"{size} (the default's upper bound; {trained}{cost}; --ctx overrides)"
        return f"{size} (the model names no trained context{cost})"


def requested_context(n_ctx: int, *, trained: int = 0, layout: KvLayout | None = None,
                      n_batch: int = 512) -> ContextChoice:
    """The :class:`ContextChoice` of a context the caller named."""
    return ContextChoice(n_ctx, "requested", max(0, trained), bytes_per_token=_per_token(layout, n_batch))


def choose_context(*, trained: int, layout: KvLayout | None, mem_available: int | None, weights_bytes: int = 0,
                   reserve_bytes: int = 0, fixed_bytes: int = 0, n_batch: int = 512, fraction: float = MEMORY_FRACTION,
                   max_ctx: int = MAX_AUTO_CTX) -> ContextChoice:
    """The default context of a model trained on ``trained`` tokens (0: unknown) on this machine.

    Args:
        trained: the model's trained context (GGUF ``<arch>.context_length``; 0 when absent).
        layout: the KV cache's shape (None: unknown, so memory is not checked).
        mem_available: bytes the kernel says are available (``MemAvailable``; None: unknown).
        weights_bytes: the model's weights (its file); counted as used, since they must stay resident.
        reserve_bytes: what the caller would hold beside the KV cache (prefix snapshots); it gets at
            most :data:`RESERVE_SHARE` of the memory left after the weights (the choice's ``reserve_bytes``).
        fixed_bytes: what the context costs whatever its length (llama.cpp's batch of logits rows),
            counted whole.
        n_batch: rows per forward (the attention scratch grows with it).
        fraction: the share of the memory left after the weights that the context may take.
        max_ctx: the largest default.
    """
    if not 0 < fraction <= 1:
        raise InvalidOption(f"fraction must be in (0, 1], got {fraction}", param="fraction")
    if max_ctx < 1:
        raise InvalidOption(f"max_ctx must be >= 1, got {max_ctx}", param="max_ctx")
    trained = max(0, int(trained))
    want, reason = (trained, "trained") if trained else (FALLBACK_CTX, "unknown")
    if want > max_ctx:
        want, reason = max_ctx, "cap"
    per_token = _per_token(layout, n_batch)
    if mem_available is None or not per_token:
        return ContextChoice(want, reason, trained, bytes_per_token=per_token)
    free = max(0, int(max(0, mem_available - weights_bytes) * fraction) - max(0, fixed_bytes))
    reserve = min(max(0, reserve_bytes), int(free * RESERVE_SHARE))
    budget = free - reserve
    limit = budget // per_token
    if limit < want:
        floor = min(want, MIN_AUTO_CTX)
        want, reason = max(floor, limit // CTX_STEP * CTX_STEP), "memory"
    return ContextChoice(want, reason, trained, memory_limit=limit, bytes_per_token=per_token, budget_bytes=budget,
                         reserve_bytes=reserve)


def mem_available_bytes(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """``MemAvailable`` of ``meminfo`` in bytes (None where there is no such file or line)."""
    try:
        text = Path(meminfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            try:
                value = int(parts[1])
            except (IndexError, ValueError):
                return None
            unit = parts[2].lower() if len(parts) > 2 else "b"
            return value * {"kb": 1024, "mb": 1024**2, "gb": 1024**3}.get(unit, 1)
    return None


def _per_token(layout: KvLayout | None, n_batch: int) -> int:
    if layout is None:
        return 0
    return layout.kv_bytes_per_token + layout.scratch_bytes_per_token(n_batch)


def _mib(nbytes: int) -> str:
    if nbytes >= 10 * 2**30:
        return f"{nbytes / 2**30:.0f} GiB"
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.1f} GiB"
    return f"{nbytes / 2**20:.0f} MiB"

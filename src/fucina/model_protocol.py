"""The model contract the speculative layers depend on (docs/design.md §3.1).

Duck-typed on purpose: anything with these members can be decoded, plain or speculatively.
Two implementations ship: :mod:`fucina.backends.llama_cpp` (real GGUF models) and
:mod:`fucina.backends.fake` (a deterministic, batch-invariant model for exact tests).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Model(Protocol):
    """A causal LM with a rewindable KV cache.

    Logits returned by the forward calls may be views into engine memory that stay valid only until
    the next forward, truncate or reset; copy them if you keep them.
    """

    vocab_size: int
    context_length: int
    eos_ids: frozenset[int]
    #: False for recurrent/hybrid models whose state cannot be truncated (no speculation).
    rewindable: bool

    @property
    def kv_len(self) -> int:
        """Number of tokens currently held in the KV cache."""
        ...

    def forward_step(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to the cache; return the logits of the last position, shape ``[vocab]``.

        Raises :class:`~fucina.errors.ContextOverflow` (cache unchanged) when they do not fit.
        """
        ...

    def forward_step_all_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` in ONE batched forward; return every row's logits, ``[len(tokens), vocab]``."""
        ...

    def truncate(self, n: int) -> None:
        """Drop cache rows past ``n``; re-appending must give the logits of a fresh evaluation."""
        ...

    def reset(self) -> None:
        """Empty the cache."""
        ...

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token's piece (may be a partial UTF-8 sequence)."""
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` (invalid UTF-8 replaced)."""
        ...

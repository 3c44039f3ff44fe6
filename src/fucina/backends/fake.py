"""A deterministic, batch-invariant fake model for exact tests.

Each row's logits are a pure function of the prefix that row is conditioned on, computed
independently per row, so ``forward_step_all_logits(t)[i]`` is bitwise the row ``forward_step``
returns after feeding ``t[:i+1]`` — the property real engines only approximate.

Structure, so drafting has something to find: a hashed n-gram "language" (a peaked random row per
last-``order``-tokens context, so greedy text falls into cycles) plus an induction bonus (if the last
two tokens occurred before, the token that followed their most recent occurrence is boosted, so
the model copies its prompt the way real LMs copy context).
"""

from __future__ import annotations

import zlib
from typing import Callable, Sequence

import numpy as np

from fucina.errors import ContextOverflow, DecodeError, InvalidOption, NotRewindable

#: The name :meth:`FakeModel.chat_template` reports when the model has its minimal template.
FAKE_TEMPLATE = "fake"

# Byte-level vocabulary: ids 0..255 are bytes, then BOS and EOS.
BOS_ID = 256
EOS_ID = 257


class FakeModel:
    """Implements :class:`fucina.model_protocol.Model` in pure numpy.

    Args:
        vocab_size: at least 258 (bytes + BOS + EOS); extra ids render as ``<tN>``.
        context_length: KV capacity; exceeding it raises :class:`ContextOverflow`.
        order: how many trailing tokens seed the n-gram row.
        induction: logit bonus for copying the continuation of the last bigram's previous occurrence.
        seed: changes the whole "language".
        rewindable: ``False`` simulates a recurrent model (truncate raises :class:`NotRewindable`).
        eos_bias: added to the EOS logit everywhere (negative keeps generations long).
        chat: give the model a (minimal) chat template, so chat paths can be tested.
    """

    def __init__(
        self,
        vocab_size: int = 320,
        context_length: int = 4096,
        *,
        order: int = 2,
        induction: float = 6.0,
        seed: int = 0,
        rewindable: bool = True,
        eos_bias: float = -4.0,
        chat: bool = False,
    ) -> None:
        if vocab_size < 258:
            raise InvalidOption(f"vocab_size must be >= 258 (bytes + BOS + EOS), got {vocab_size}")
        if context_length < 1:
            raise InvalidOption(f"context_length must be >= 1, got {context_length}")
        if order < 1:
            raise InvalidOption(f"order must be >= 1, got {order}")
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.eos_ids = frozenset({EOS_ID})
        self.rewindable = rewindable
        self.order = order
        self.induction = induction
        self.seed = seed
        self.eos_bias = eos_bias
        self.chat = chat
        #: Rows are computed independently, so batched verifies equal single steps bit for bit.
        self.batch_invariant = True
        self._tokens: list[int] = []
        self.forward_calls = 0
        #: Test hook: called with the batch before evaluation; raising simulates an engine failure.
        self.before_forward: Callable[[Sequence[int]], None] | None = None

    # -- cache -------------------------------------------------------------------------------
    @property
    def kv_len(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """Tokens currently in the cache (a copy)."""
        return list(self._tokens)

    def truncate(self, n: int) -> None:
        if not self.rewindable:
            raise NotRewindable("FakeModel(rewindable=False) cannot truncate its state")
        if n < 0:
            raise InvalidOption(f"truncate length must be >= 0, got {n}")
        del self._tokens[n:]

    def reset(self) -> None:
        self._tokens.clear()

    def snapshot(self) -> np.ndarray:
        """A copy of the cache (its token ids); :meth:`restore` makes the cache hold them again."""
        return np.array(self._tokens, dtype=np.int64)

    def snapshot_nbytes(self) -> int:
        """The bytes a :meth:`snapshot` taken now would hold."""
        return 8 * len(self._tokens)

    def restore(self, snapshot: np.ndarray) -> None:
        """Replace the cache with one taken by :meth:`snapshot` (the snapshot stays usable)."""
        self._tokens = [int(t) for t in snapshot]

    # -- forward -----------------------------------------------------------------------------
    def forward_step(self, tokens: Sequence[int]) -> np.ndarray:
        return self.forward_step_all_logits(tokens)[-1]

    def forward_step_all_logits(self, tokens: Sequence[int]) -> np.ndarray:
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise InvalidOption("forward needs at least one token")
        for t in tokens:
            if not 0 <= t < self.vocab_size:
                raise InvalidOption(f"token id {t} outside the vocabulary [0, {self.vocab_size})")
        if len(self._tokens) + len(tokens) > self.context_length:
            raise ContextOverflow(
                f"{len(self._tokens)} cached + {len(tokens)} new tokens exceed the context of {self.context_length}"
            )
        if self.before_forward is not None:
            try:
                self.before_forward(tokens)
            except Exception as exc:  # the cache is untouched: nothing was appended yet
                raise DecodeError(f"fake forward failed: {exc}") from exc
        self.forward_calls += 1
        start = len(self._tokens)
        self._tokens.extend(tokens)
        return np.stack([self._row(start + i + 1) for i in range(len(tokens))])

    def _row(self, n: int) -> np.ndarray:
        """Logits for the position after ``self._tokens[:n]`` — a pure function of that prefix."""
        ctx = self._tokens[max(0, n - self.order) : n]
        key = zlib.crc32(np.asarray(ctx, dtype=np.int64).tobytes(), self.seed & 0xFFFFFFFF)
        rng = np.random.default_rng(key)
        row = rng.standard_normal(self.vocab_size).astype(np.float32)
        # A few favoured successors make the row peaked, so greedy text is structured.
        row[rng.integers(0, self.vocab_size, size=3)] += np.float32(3.0)
        row[EOS_ID] += np.float32(self.eos_bias)
        row[BOS_ID] = np.float32(-30.0)
        if n >= 3 and self.induction:
            a, b = self._tokens[n - 2], self._tokens[n - 1]
            for j in range(n - 3, 0, -1):
                if self._tokens[j - 1] == a and self._tokens[j] == b:
                    row[self._tokens[j + 1]] += np.float32(self.induction)
                    break
        return row

    # -- text --------------------------------------------------------------------------------
    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def token_bytes(self, token: int) -> bytes:
        if token < 256:
            return bytes([token])
        return b"" if token in (BOS_ID, EOS_ID) else f"<t{token}>".encode()

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    # -- chat --------------------------------------------------------------------------------
    def chat_template(self) -> str | None:
        """``"fake"`` when built with ``chat=True`` (see :meth:`apply_chat_template`), else None."""
        return FAKE_TEMPLATE if self.chat else None

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_assistant: bool = True,
                            template: str | None = None) -> str:
        """A minimal template: ``<role>\ncontent\n`` per message, then ``<assistant>\n``."""
        if template is None and not self.chat:
            raise InvalidOption("FakeModel(chat=False) has no chat template")
        text = "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages)
        return text + ("<assistant>\n" if add_assistant else "")

"""The KV-cache prefix kept between calls of :class:`fucina.LLM`: the live cache plus saved slots.

The KV cache holds the tokens of the last call (``tokens``). Before a call truncates it to make room
for a prompt that shares less with it, the cache is saved as a *prefix slot* (a ``model.snapshot()``),
so interleaved conversations (A1 B1 A2 B2) each resume from their own prefix: a prompt that shares
more with a slot than with the live cache restores that slot. A restore puts back exactly the rows the
slot's tokens produced (bit for bit), and the speculation index is rebuilt from the prompt on every
call, so a reused prefix changes no output. Slots are bounded in count and bytes (the least recently
used is dropped first); models without ``snapshot``/``restore`` keep the single live prefix.

The default budget (:data:`DEFAULT_MAX_BYTES`, :data:`DEFAULT_MAX_SLOTS`) holds the prompts an agent or a
few users send again: a snapshot of Qwen2.5-Coder 1.5B costs ~28 KB a token (a 1k-token request: 28 MB), and
restoring one takes milliseconds where reading the prompt again takes seconds on 2 cores. At 4 slots and
256 MB, a server that saw a dozen prompts in between had dropped each one by the time it came back, and read
it again (llama.cpp's ``llama-server`` keeps up to 8 GiB of prompts by default).
"""

from __future__ import annotations

from typing import Any, Sequence

from fucina.errors import FucinaError, InvalidOption

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_SLOTS", "PrefixCache", "check_limit"]

#: Most bytes all prefix slots hold together by default (1 GiB).
DEFAULT_MAX_BYTES = 2**30
#: Most prefix slots kept by default (each is one snapshot of the KV cache).
DEFAULT_MAX_SLOTS = 64


def check_limit(value: Any, *, param: str) -> int:
    """``value`` if it is an int >= 0 (a slot budget), else :class:`InvalidOption` naming ``param``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOption(f"{param} must be an int >= 0, got {value!r}", param=param)
    return value


class PrefixCache:
    """The prefix state of one model's KV cache (used under the owner's generation lock).

    Args:
        model: the model whose KV cache this tracks (``snapshot``/``restore`` make slots possible).
        max_bytes: most bytes all saved slots hold together (0: keep no slot).
        max_slots: most saved slots (0: keep no slot).
    """

    #: A cache is saved only when a call would drop at least this many of its tokens, and a slot is
    #: restored only when it reuses at least this many more tokens than the live cache.
    min_tokens = 16

    def __init__(self, model: Any, *, max_bytes: int = DEFAULT_MAX_BYTES, max_slots: int = DEFAULT_MAX_SLOTS) -> None:
        #: Most bytes all prefix slots hold together.
        self.max_bytes = check_limit(max_bytes, param="max_bytes")
        #: Most prefix slots kept.
        self.max_slots = check_limit(max_slots, param="max_slots")
        self.model = model
        #: Tokens the model's KV cache holds (None: unknown, so the next call resets it).
        self.tokens: list[int] | None = None
        #: Saved slots, least recently used first: ``(tokens, snapshot, nbytes)``.
        self._slots: list[tuple[tuple[int, ...], Any, int]] = []

    def reuse(self, prompt: Sequence[int]) -> int:
        """Put the longest available prefix of ``prompt`` in the cache; returns its length.

        At least one prompt token is always evaluated again: the first sample needs its logits row.
        """
        model = self.model
        cached = self.tokens
        live = cached is not None and model.kv_len == len(cached)
        limit = len(prompt) - 1
        m = self._shared(cached, prompt, limit) if live else 0
        if not getattr(model, "rewindable", True):
            # Recurrent state cannot be cut back: reuse it only when the prompt extends it whole.
            if live and m == len(cached):
                return m
            model.reset()
            self.tokens = []
            return 0
        slots = self._slots
        best, best_m = -1, 0
        for i, slot in enumerate(slots):
            k = self._shared(slot[0], prompt, limit)
            if k > best_m:
                best, best_m = i, k
        slot_holds_tail = False
        if best >= 0 and best_m >= m + self.min_tokens:
            entry = slots.pop(best)
            if live:
                self._save_slot(cached, m)
            try:
                model.restore(entry[1])
                ok = model.kv_len == len(entry[0])
            except FucinaError:
                ok = False
            if not ok:
                self.forget()
                return 0
            cached, m, live = list(entry[0]), best_m, True
            if len(cached) - m >= self.min_tokens:
                # The slot keeps what the truncation below drops (and is now the most recently used).
                slots.append(entry)
                self._evict_slots()
                slot_holds_tail = True
        if not live:
            model.reset()
            self.tokens = []
            return 0
        if m < len(cached):
            if not slot_holds_tail:
                self._save_slot(cached, m)
            model.truncate(m)
        self.tokens = cached[:m]
        return m

    @staticmethod
    def _shared(cached: Sequence[int] | None, prompt: Sequence[int], limit: int) -> int:
        """Length of the common prefix of ``cached`` and ``prompt``, at most ``limit``."""
        if not cached:
            return 0
        m, limit = 0, min(len(cached), limit)
        while m < limit and cached[m] == prompt[m]:
            m += 1
        return m

    def _save_slot(self, cached: list[int], keep: int) -> None:
        """Snapshot the live cache (``cached``) before a call keeps only its first ``keep`` tokens."""
        snapshot = getattr(self.model, "snapshot", None)
        if (snapshot is None or not hasattr(self.model, "restore") or self.max_slots < 1
                or len(cached) - keep < self.min_tokens):
            return
        size = getattr(self.model, "snapshot_nbytes", None)
        try:
            if size is not None and size() > self.max_bytes:
                return  # it could not be kept: not worth the copy (a long context's is hundreds of MB)
            snap = snapshot()
        except FucinaError:
            return
        nbytes = int(getattr(snap, "nbytes", 0))
        if nbytes > self.max_bytes:
            return
        tokens = tuple(cached)
        slots = self._slots
        # A slot whose tokens start the new one holds nothing the new one lacks.
        slots[:] = [s for s in slots if not (len(s[0]) <= len(tokens) and tokens[:len(s[0])] == s[0])]
        slots.append((tokens, snap, nbytes))
        self._evict_slots()

    def _evict_slots(self) -> None:
        slots = self._slots
        while len(slots) > self.max_slots or sum(s[2] for s in slots) > self.max_bytes:
            slots.pop(0)

    def slots(self) -> list[tuple[int, int]]:
        """``(tokens, bytes)`` of each saved prefix slot, least recently used first.

        Lock-free (a copy of the list), so a server can report it while a generation runs.
        """
        return [(len(s[0]), s[2]) for s in list(self._slots)]

    def settle(self, history: Sequence[int]) -> None:
        """After a call: the cache holds ``history``'s first ``kv_len`` tokens (all but the carried one)."""
        n = self.model.kv_len
        self.tokens = list(history[:n]) if n <= len(history) else None

    def invalidate(self) -> None:
        """Someone else ran forwards on the model: the next call starts from an empty cache."""
        self.tokens = None

    def clear(self) -> None:
        """Drop every saved slot (the live cache stays)."""
        self._slots.clear()

    def forget(self) -> None:
        """Empty the live cache (after an engine fault); saved prefix slots are copies and stay."""
        try:
            self.model.reset()
        finally:
            self.tokens = []

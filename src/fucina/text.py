"""Committed tokens to text: UTF-8 held back until complete, cut at the first stop string.

:class:`TextLoop` is the one loop :class:`fucina.LLM` calls and :class:`fucina.chat.Conversation`
turns run over a decoder's committed tokens; :class:`TextStreamer` and :class:`StopScanner` are its
two stages.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Literal, Sequence

__all__ = ["StopScanner", "TextLoop", "TextPiece", "TextStreamer"]

#: What ended a text loop: a stop token id, a stop string, or (None) the tokens ran out.
EndedBy = Literal["stop_id", "stop_string"]


class TextStreamer:
    """Turns token ids into text chunks, holding back incomplete UTF-8 sequences."""

    def __init__(self, model) -> None:
        self._model = model
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._dec.decode(self._model.token_bytes(token))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class StopScanner:
    """Streams text while withholding anything that could still become a stop string.

    ``push`` returns (text safe to show, whether a stop string completed); on a hit the text is cut
    right before the earliest stop string and nothing after it is ever shown.
    """

    def __init__(self, sequences: Sequence[str]) -> None:
        self._seqs = tuple(sequences)
        self._buf = ""

    def push(self, chunk: str) -> tuple[str, bool]:
        buf = self._buf + chunk
        hits = [i for i in (buf.find(s) for s in self._seqs) if i >= 0]
        if hits:
            self._buf = ""
            return buf[: min(hits)], True
        # Hold back the longest suffix that is a proper prefix of some sequence: a sequence
        # starting there may complete with the next chunk.
        hold = 0
        for s in self._seqs:
            for k in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:k]):
                    hold = k
                    break
        self._buf = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return out


@dataclass(frozen=True)
class TextPiece:
    """Text safe to show, and the tokens consumed since the previous piece."""

    text: str
    token_ids: tuple[int, ...]


class TextLoop:
    """One pass over committed tokens: yields :class:`TextPiece` s (never empty text).

    A token in ``stop_ids`` ends the loop and is not part of the text; a completed stop string ends
    it with the text cut right before it. When the tokens run out (or a stop id ended them) the
    held-back bytes and any unfinished stop-string prefix are flushed: the flushed bytes may still
    complete a stop string. After (or during) :meth:`run`: :attr:`tokens` holds every token consumed,
    :attr:`unsent` those in no piece yet, :attr:`ended_by` what ended it and :attr:`first_token_at`
    the ``clock`` reading when the first token arrived.
    """

    def __init__(self, model, *, stop_ids: Iterable[int], stop_strings: Sequence[str] = (),
                 clock: Callable[[], float] | None = None) -> None:
        self._streamer = TextStreamer(model)
        self._scanner = StopScanner(stop_strings) if stop_strings else None
        self._stop_ids = frozenset(int(t) for t in stop_ids)
        self._clock = clock
        self.tokens: list[int] = []
        self.ended_by: EndedBy | None = None
        self.first_token_at: float | None = None
        self._unsent: list[int] = []

    @property
    def unsent(self) -> tuple[int, ...]:
        """Tokens consumed since the last piece (an end token, or bytes that made no text yet)."""
        return tuple(self._unsent)

    def run(self, tokens: Iterable[int]) -> Iterator[TextPiece]:
        for tok in tokens:
            self.tokens.append(tok)
            self._unsent.append(tok)
            if self.first_token_at is None and self._clock is not None:
                self.first_token_at = self._clock()
            if tok in self._stop_ids:
                self.ended_by = "stop_id"
                break  # the end marker is not part of the text
            text, cut = self._scan(self._streamer.push(tok))
            if text:
                yield self._piece(text)
            if cut:
                self.ended_by = "stop_string"
                return
        text, cut = self._scan(self._streamer.flush())
        if cut:
            self.ended_by = "stop_string"
        elif self._scanner is not None:
            text += self._scanner.flush()
        if text:
            yield self._piece(text)

    def _scan(self, text: str) -> tuple[str, bool]:
        return (text, False) if self._scanner is None else self._scanner.push(text)

    def _piece(self, text: str) -> TextPiece:
        piece = TextPiece(text, tuple(self._unsent))
        self._unsent = []
        return piece

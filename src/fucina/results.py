"""What a call of :class:`fucina.LLM` returns: frozen, typed results.

Glossary of the speculation counters (the same words in stats, logs and the server's ``fucina``
block):

* a **candidate** is what the draft sources offer at a step; the drafting policy verifies a prefix
  of it or **declines** it (a plain step), and scores every candidate against the tokens committed
  after it either way (:mod:`fucina.speculative.policy`);
* **drafted** — tokens a draft source proposed and one batched forward verified;
* **accepted** — drafted tokens the sampler then picked itself (a prefix of each draft);
* a **correction** token is the sampler's own pick at the first rejected position, and a **bonus**
  token its pick after a fully accepted draft: both are committed, neither counts as accepted;
* **steps** — forwards of the decode loop (plain steps + verifies); ``committed / steps`` is the
  tokens each forward bought.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

#: ``tool_calls``: a chat with tools ended after the model called one or more (see :class:`ToolCall`).
FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class ToolCall:
    """One function call the model wrote (OpenAI's ``tool_calls`` item)."""

    id: str
    name: str
    #: The arguments as the model wrote them: JSON text (OpenAI hands them over unparsed too).
    arguments: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A streamed piece of the tool call at ``index``: its first delta carries ``id`` and ``name``,
    the later ones pieces of ``arguments`` (joined, they are :attr:`ToolCall.arguments`)."""

    index: int
    id: Optional[str] = None
    name: Optional[str] = None
    arguments: str = ""


@dataclass(frozen=True)
class Usage:
    """Token counts of one call, as OpenAI reports them."""

    prompt_tokens: int
    completion_tokens: int
    #: Prompt tokens whose KV was reused from the previous call (not evaluated again).
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class SourceReport:
    """One draft source's share of a call (or, from the index, of its lifetime): tokens it drafted and
    how many were accepted."""

    name: str
    drafted: int
    accepted: int

    @property
    def acceptance(self) -> float:
        """accepted / drafted (0.0 before the first draft)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    def __str__(self) -> str:
        return f"{self.name} {self.accepted}/{self.drafted}"


class SpeculationRates:
    """The two ratios of a speculation's counts, for the types that carry ``steps``, ``committed``,
    ``drafted`` and ``accepted`` (the decoder's live :class:`~fucina.speculative.decoder.SpecStats`
    and a call's :class:`SpeculationReport`)."""

    steps: int
    committed: int
    drafted: int
    accepted: int

    @property
    def tokens_per_step(self) -> float:
        """Tokens committed per forward (1.0 for plain decoding)."""
        return self.committed / self.steps if self.steps else 0.0

    @property
    def acceptance(self) -> float:
        """Accepted draft tokens over drafted ones (0.0 before the first draft)."""
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(frozen=True)
class SpeculationReport(SpeculationRates):
    """What speculation did in one call (see the module glossary).

    ``level`` is ``"exact"`` when every verify the decoder could issue is bitwise equal to plain
    decoding on this engine, else ``"distribution"`` (see ``fucina doctor``).
    """

    steps: int
    verifies: int
    drafted: int
    accepted: int
    committed: int
    #: The drafting policy's summary (verifies chosen, candidates declined, live cost scale), as the CLI's stats line shows it.
    policy: str
    sources: tuple[SourceReport, ...]
    level: str
    #: Why the draft source was dropped mid-call (the call went on with plain steps), or None.
    source_fault: str | None = None


    def source(self, name: str) -> SourceReport:
        """The report of source ``name`` (``conversation``, ``ref0``.., ``recycling``)."""
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(name)

    def __str__(self) -> str:
        return (
            f"spec: steps={self.steps} committed={self.committed} ({self.tokens_per_step:.2f} tok/step) "
            f"verifies={self.verifies} drafted={self.drafted} accepted={self.accepted} "
            f"({100 * self.acceptance:.0f}% acc)  {self.policy}  level={self.level}"
        )

    def sources_line(self) -> str:
        """``spec sources: conversation a/d ref0 a/d ...``."""
        return "spec sources: " + " ".join(f"{s.name} {s.accepted}/{s.drafted}" for s in self.sources)


@dataclass(frozen=True)
class Timings:
    """Wall-clock split of one call (seconds); rates are 0 when nothing was timed."""

    prompt_seconds: float
    #: From the call's start to its first generated token (time to first token).
    first_token_seconds: float
    generate_seconds: float
    generated_tokens: int

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds > 0 else 0.0


@dataclass(frozen=True)
class TopLogprob:
    """One of the most likely tokens at a position, with its log-probability (natural log)."""

    token_id: int
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of one generated token, and the most likely tokens at its position.

    Log-probabilities are of the model's *raw* distribution: a float64 log-softmax of the logits row
    the token was sampled from, before penalties, temperature, top-k/top-p/min-p (what OpenAI and
    llama.cpp report). ``top`` holds the requested number of most likely tokens, most likely first
    (ties by lowest id); the generated token may or may not be among them. ``text_offset`` is where
    the token's text starts in the call's ``text`` (characters, counted before any stop-string cut):
    a token at or past ``len(text)`` shows nothing there (the end token, text cut by a stop string).
    """

    token_id: int
    logprob: float
    top: tuple[TopLogprob, ...] = ()
    text_offset: int = 0


@dataclass(frozen=True)
class Completion:
    """The whole result of :meth:`LLM.complete` or :meth:`LLM.chat`.

    ``text`` is cut before the first stop string and never contains the end-of-generation marker;
    ``token_ids`` are every token the call generated up to the one that ended it (an end token or the
    token completing a stop string included), so ``len(token_ids) == usage.completion_tokens``.
    ``stats`` is None when the call decoded plainly. ``logprobs`` (when the call asked for them) holds
    one :class:`TokenLogprob` per entry of ``token_ids``, in order; None otherwise.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    stats: Optional[SpeculationReport] = None
    logprobs: Optional[tuple[TokenLogprob, ...]] = None
    #: The calls a chat with tools made (``finish_reason`` is then ``tool_calls``); ``text`` is what
    #: the model wrote outside them.
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class CompletionChunk:
    """One piece of a streamed call.

    Every chunk but the last carries new ``text`` and the ``token_ids`` generated since the previous
    chunk; the last one carries ``finish_reason``, ``usage``, ``timings`` and ``stats`` (its text may
    be empty). Joining every chunk's text gives the non-streamed ``Completion.text``. ``logprobs``
    (when the call asked for them) is aligned with ``token_ids``; None otherwise.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: Optional[FinishReason] = None
    usage: Optional[Usage] = None
    timings: Optional[Timings] = None
    stats: Optional[SpeculationReport] = None
    logprobs: Optional[tuple[TokenLogprob, ...]] = None
    #: Pieces of the tool calls (a chat with tools); ``text`` is then only what is outside them.
    tool_calls: tuple[ToolCallDelta, ...] = ()

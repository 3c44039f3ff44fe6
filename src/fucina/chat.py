"""Multi-turn chat over a model's own chat template, with optional lossless speculation.

:class:`Conversation` keeps ONE decoder (and, with speculation, ONE :class:`SpeculationIndex`) for
the whole conversation, so the KV cache and the conversation SAM persist across turns:

* Turn n feeds only the template text between the end of the committed stream and the next
  assistant header. The assistant's generated tokens, including the stop token that ended its
  turn, stay in the stream exactly as generated: they are never re-tokenized. When the template's
  end-of-turn marker tokenizes to the very stop token the model produced, that marker is not fed
  again (the model's own token already stands for it).
* With speculation, a :class:`TurnGate` sits between the decoder and the index and keeps the
  conversation SAM byte-exact with the committed stream (see its docstring).

Two views of a conversation, deliberately distinct:

* ``transcript`` holds the text the user saw: the assistant's content is the committed reply
  without its stop marker (stop-id token, or the stop sequence and anything after it).
* ``tokens`` holds what the model saw: every committed token, stop markers included.

Interrupting a turn (closing the iterator :meth:`Conversation.send` returned, or an exception such
as ``KeyboardInterrupt`` raised inside it) records the turn as it stands: the user message plus an
assistant message holding every token the decoder had *committed* (a verify batch commits several
tokens at once, so this can run a few tokens past the last chunk the consumer received). The KV
cache, the decoder history and the index all hold exactly that stream, and the next turn continues
from it. An interrupt before the user's prompt was evaluated records nothing.

Template text is tokenized with special-token parsing on (as llama.cpp's own server does), so
marker strings typed inside a message become markers.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence, Union

import numpy as np

from fucina.errors import (ChatTemplateMismatch, ChatTemplateMissing, ContextOverflow,
                           ConversationDesync, InvalidOption, SpeculationDisabled,
                           StopSequencesNeedPlainDecoding)
from fucina.decoders import DecoderFactory, SpeculationOptions
from fucina.plain import GenerationStats, PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.index import CascadeStats, SpeculationIndex
from fucina.speculative.decoder import SpecOptions, SpecStats, SpeculativeDecoder
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import AcceptanceModel
from fucina.speculative.turn_gate import TurnGate
from fucina.text import TextLoop

__all__ = ["ChatOptions", "ChatStats", "Conversation", "Renderer", "TurnGate", "tokenize_rendered"]

Message = dict[str, str]
#: A chat template as a function: (messages, add_assistant_header) -> prompt text.
Renderer = Callable[[Sequence[Mapping[str, str]], bool], str]


# -- options -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatOptions:
    """How a :class:`Conversation` decodes; validated at construction (raises InvalidOption).

    ``stop_sequences`` are matched on the decoded text and need plain decoding: a speculative
    verify samples a whole batch of rows before the text is inspected, so the token completing a
    sequence could be accepted mid-batch with more tokens committed (and more random draws taken)
    after it. Token-id stops (the model's end-of-generation ids plus ``extra_stop_ids``) are
    checked inside the verify loop and are safe with speculation.
    """

    speculation: bool = False
    spec_options: SpecOptions = field(default_factory=SpecOptions)
    sampler: SamplerOptions = field(default_factory=SamplerOptions)
    #: Token ids that end a turn, in addition to the model's end-of-generation ids.
    extra_stop_ids: tuple[int, ...] = ()
    #: Text that ends a turn (plain decoding only); the sequence is not part of the reply.
    stop_sequences: tuple[str, ...] = ()
    #: Most tokens generated per turn.
    max_tokens: int = 512
    #: System message placed first in the transcript (None: the template's default, if any).
    system: str | None = None
    #: Timer for the speculation gate's live cost rescale (e.g. ``time.perf_counter``); None = static table.
    clock: Callable[[], float] | None = None
    #: Verify cost table; None with speculation = the cached/calibrated table for this machine.
    cost_table: CostTable | None = None
    #: A template string for llama.cpp's engine, or a :data:`Renderer`; None = the model's own.
    template: Union[str, Renderer, None] = None

    def __post_init__(self) -> None:
        if not isinstance(self.speculation, bool):
            raise InvalidOption(f"speculation must be a bool, got {self.speculation!r}")
        if not isinstance(self.spec_options, SpecOptions):
            raise InvalidOption(f"spec_options must be SpecOptions, got {type(self.spec_options).__name__}")
        if not isinstance(self.sampler, SamplerOptions):
            raise InvalidOption(f"sampler must be SamplerOptions, got {type(self.sampler).__name__}")
        ids = _as_tuple(self.extra_stop_ids, "extra_stop_ids")
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
                raise InvalidOption(f"extra_stop_ids must be token ids >= 0, got {t!r}")
        object.__setattr__(self, "extra_stop_ids", tuple(sorted({int(t) for t in ids})))
        seqs = _as_tuple(self.stop_sequences, "stop_sequences")
        for s in seqs:
            if not isinstance(s, str) or not s:
                raise InvalidOption(f"stop_sequences must be non-empty strings, got {s!r}")
        object.__setattr__(self, "stop_sequences", seqs)
        if seqs and self.speculation:
            raise StopSequencesNeedPlainDecoding(
                "stop_sequences need plain decoding: a speculative verify can accept the token that "
                "completes a sequence in the middle of a batch and commit (and sample) tokens after it, "
                "breaking the one-random-draw-per-committed-token contract; use extra_stop_ids "
                "(checked inside the verify loop) or speculation=False"
            )
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidOption(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if self.system is not None and not isinstance(self.system, str):
            raise InvalidOption(f"system must be a string or None, got {type(self.system).__name__}")
        if self.clock is not None and not callable(self.clock):
            raise InvalidOption("clock must be callable or None")
        if self.cost_table is not None and not isinstance(self.cost_table, CostTable):
            raise InvalidOption(f"cost_table must be a CostTable or None, got {type(self.cost_table).__name__}")
        if self.template is not None and not (isinstance(self.template, str) or callable(self.template)):
            raise InvalidOption("template must be a template string, a renderer callable, or None")


def _as_tuple(value: object, name: str) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, set, frozenset)):
        raise InvalidOption(f"{name} must be a sequence, got {value!r}")
    return tuple(value)


# -- stats ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatStats:
    """A snapshot of a conversation's counters; ``str()`` is what ``/stats`` prints."""

    turns: int
    #: Tokens in the committed stream (prompt, template and generated).
    committed: int
    last_turn: GenerationStats
    #: Decoder counters over the whole conversation (None without speculation).
    spec: SpecStats | None = None
    #: The drafting policy's summary (None without speculation).
    policy: str | None = None
    #: Per-source acceptance (conversation, ref0.., recycling); None without speculation.
    sources: CascadeStats | None = None

    def __str__(self) -> str:
        lines = [f"turns: {self.turns}  context: {self.committed} tok  last turn: {self.last_turn}"]
        if self.spec is not None:
            lines.append(f"{self.spec}  {self.policy}")
            lines.append(f"spec sources: {self.sources}")
        return "\n".join(lines)


# -- the conversation -------------------------------------------------------------------------------


class Conversation:
    """A multi-turn chat that owns ``model``'s KV cache (one conversation per model at a time).

    ``acceptance``: the drafting policy's acceptance model to learn in (e.g. its LLM's, shared with the
    LLM's calls); None: a fresh one from the policy's priors at construction and at each :meth:`reset`.

    Raises :class:`ChatTemplateMissing` when the model has no template and none is given, and the
    backend's InvalidOption when llama.cpp cannot render the template.
    """

    def __init__(self, model, options: ChatOptions | None = None, *,
                 acceptance: AcceptanceModel | None = None) -> None:
        self.model = model
        self._acceptance = acceptance
        self.options = opts = options if options is not None else ChatOptions()
        if not isinstance(opts, ChatOptions):
            raise InvalidOption(f"options must be ChatOptions, got {type(opts).__name__}")
        self._render = _renderer(model, opts.template)
        self._render([{"role": "user", "content": "ping"}], True)  # fail now, not mid-chat
        self._stops = frozenset(int(t) for t in model.eos_ids) | frozenset(opts.extra_stop_ids)
        bad = [t for t in opts.extra_stop_ids if t >= model.vocab_size]
        if bad:
            raise InvalidOption(f"extra_stop_ids {bad} outside the vocabulary [0, {model.vocab_size})")
        self._cost_table = opts.cost_table
        if opts.speculation and self._cost_table is None:
            from fucina.calibrate import load_or_calibrate

            self._cost_table = load_or_calibrate(model)
        self._refs: list[list[int]] = []
        self._active: Iterator[str] | None = None
        self.reset()

    # -- public API ----------------------------------------------------------------------------

    def send(self, text: str) -> Iterator[str]:
        """Add a user message and stream the assistant's reply as text chunks.

        The turn runs as the iterator is consumed. A previous turn's iterator that was left
        suspended is closed first (a started turn is recorded as interrupted; one never iterated
        leaves no trace).
        """
        if not isinstance(text, str):
            raise InvalidOption(f"a message must be a string, got {type(text).__name__}")
        self._close_active()
        self._active = turn = self._turn(text)
        return turn

    def reply(self, text: str) -> str:
        """:meth:`send`, consumed: the whole reply text."""
        return "".join(self.send(text))

    def add_spec_reference(self, reference: Union[str, Sequence[int]]) -> int:
        """Index a reference document for drafting; returns its slot (``ref{slot}`` in stats).

        Text is tokenized with the model's own tokenizer (no BOS). Token lists must come from that
        same tokenizer, or the reference never aligns with the stream (zero acceptance, visible in
        :meth:`stats`). Raises :class:`SpeculationDisabled` on a plain conversation. References
        survive :meth:`reset`.
        """
        if self._index is None:
            raise SpeculationDisabled(
                "reference documents feed the speculation index; construct the Conversation with "
                "ChatOptions(speculation=True)"
            )
        if isinstance(reference, str):
            toks = list(self.model.tokenize(reference, add_bos=False))
        else:
            toks = [int(t) for t in reference]
        slot = self._index.add_reference(toks)
        self._refs.append(toks)
        return slot

    def reset(self) -> None:
        """Start over: empty cache, transcript and stats; fresh sampler; references kept."""
        self._close_active()
        opts = self.options
        self.model.reset()
        sampler = Sampler(opts.sampler)
        self._index: SpeculationIndex | None = None
        self._gate: TurnGate | None = None
        if opts.speculation:
            assert self._cost_table is not None
            decoders = DecoderFactory(self.model, SpeculationOptions(
                cost_table=self._cost_table, decoder=opts.spec_options, clock=opts.clock), acceptance=self._acceptance)
            self._index = decoders.index(references=self._refs)
            self._gate = TurnGate(self._index)
            self._decoder = decoders.decoder(sampler, source=self._gate)
        else:
            self._decoder = PlainDecoder(self.model, sampler)
        self._messages: list[Message] = []
        if opts.system is not None:
            self._messages.append({"role": "system", "content": opts.system})
        self._head: str | None = None  # rendered prompt up to the last assistant header
        self._last_content = ""  # that assistant's recorded reply
        self._ended_on: int | None = None  # the stop token that ended it, if any
        self._turns = 0
        self._last_stats = GenerationStats()

    @property
    def transcript(self) -> list[Message]:
        """The messages so far (system first if set), as the user saw them; a copy."""
        return [dict(m) for m in self._messages]

    @property
    def tokens(self) -> list[int]:
        """The committed token stream (what the model saw); a copy."""
        return list(self._decoder.history)

    @property
    def speculative(self) -> bool:
        """True when the conversation decodes speculatively."""
        return self._index is not None

    @property
    def decoder(self) -> PlainDecoder | SpeculativeDecoder:
        """The conversation's decoder (its ``history`` is :attr:`tokens`); for inspection."""
        return self._decoder

    @property
    def index(self) -> SpeculationIndex | None:
        """The conversation's speculation index (None without speculation); for inspection."""
        return self._index

    def stats(self) -> ChatStats:
        """Turn count, last turn's timing and, with speculation, decoder and per-source counters."""
        last = dataclasses.replace(self._last_stats)
        if self._index is None:
            return ChatStats(self._turns, len(self._decoder.history), last)
        dec = self._decoder
        return ChatStats(self._turns, len(dec.history), last, dataclasses.replace(dec.stats),
                         str(dec.policy), self._index.stats())

    # -- a turn -------------------------------------------------------------------------------------

    def _turn(self, text: str) -> Iterator[str]:
        dec, model, opts = self._decoder, self.model, self.options
        if model.kv_len not in (len(dec.history), len(dec.history) - 1):
            raise ConversationDesync(
                f"the model's cache holds {model.kv_len} tokens but the conversation committed "
                f"{len(dec.history)}; another user of the model changed it (call reset())"
            )
        messages = [*self._messages, {"role": "user", "content": text}]
        prompt_text = self._render(messages, True)
        new = self._tokens_to_feed(prompt_text)
        stats = GenerationStats()
        start = len(dec.history)
        if self._gate is not None:
            self._gate.open()
        t0 = time.perf_counter()
        try:
            dec.feed(new)  # a failed forward leaves cache and history as they were
        except BaseException:
            if len(dec.history) > start:  # interrupted after the prompt went in: keep the books straight
                stats.stop_reason = "interrupted"
                self._record(text, prompt_text, len(dec.history), [], stats)
            raise
        # From here the user's message is in the cache, so the turn is recorded whatever happens.
        prompt_end = len(dec.history)
        t1 = time.perf_counter()
        shown: list[str] = []
        stream = None
        loop: TextLoop | None = None
        try:
            stats.prompt_tokens = len(new)
            stats.prompt_seconds = t1 - t0
            stops = self._stops
            room = model.context_length - model.kv_len
            budget = min(opts.max_tokens, room)
            stats.stop_reason = "length" if budget == opts.max_tokens else "context"
            if self._gate is not None:
                self._gate.arm(stops)
            loop = TextLoop(model, stop_ids=stops, stop_strings=opts.stop_sequences)
            stream = dec.generate(budget, stops)
            for piece in loop.run(stream):
                shown.append(piece.text)
                yield piece.text
            if loop.ended_by is not None:  # the stop marker is not part of the reply text
                stats.stop_reason = "stop" if loop.ended_by == "stop_id" else "stop_sequence"
        except ContextOverflow:
            stats.stop_reason = "context"
        except BaseException:
            stats.stop_reason = "interrupted"
            raise
        finally:
            if stream is not None:
                stream.close()
            if loop is not None:
                stats.generated_tokens = len(loop.tokens)
            stats.gen_seconds = time.perf_counter() - t1
            self._record(text, prompt_text, prompt_end, shown, stats)

    def _record(self, text: str, prompt_text: str, prompt_end: int, shown: list[str],
                stats: GenerationStats) -> None:
        hist = self._decoder.history
        reply = hist[prompt_end:]
        # The decoder never commits past a stop, so a stop id can only be the reply's last token.
        self._ended_on = reply[-1] if reply and reply[-1] in self._stops else None
        if stats.stop_reason == "stop_sequence":
            content = "".join(shown)
        else:
            body = reply[:-1] if self._ended_on is not None else reply
            content = self.model.detokenize(body)
        self._messages += [{"role": "user", "content": text}, {"role": "assistant", "content": content}]
        self._head = prompt_text
        self._last_content = content
        self._turns += 1
        self._last_stats = stats
        self._active = None
        if self._index is not None and self._index.n_committed < len(hist):
            # An interrupt landed between the decoder's commit and its observe: catch the index up,
            # so the conversation SAM is the committed stream again.
            self._index.truncate_pending(0)
            self._index.observe(hist[self._index.n_committed:])

    def _tokens_to_feed(self, prompt_text: str) -> list[int]:
        """Tokens of ``prompt_text`` past the committed stream (the whole prompt on turn one)."""
        tok = self.model.tokenize
        if self._head is None:
            return tokenize_rendered(self.model, prompt_text)
        head, content = self._head, self._last_content
        if not prompt_text.startswith(head):
            raise ChatTemplateMismatch(
                "the chat template rendered earlier turns differently this time, so the cached "
                "conversation cannot be extended; call reset()"
            )
        tail = prompt_text[len(head):]
        if tail.startswith(content):
            cut = len(content)
        else:  # templates may trim or wrap the content (e.g. Gemma trims whitespace)
            core = content.strip()
            at = tail.find(core)
            if at < 0:
                raise ChatTemplateMismatch("the chat template does not reproduce the assistant's reply")
            cut = at + len(core)
        toks = list(tok(tail[cut:], add_bos=False, special=True))
        if self._ended_on is not None and toks and toks[0] == self._ended_on:
            toks = toks[1:]  # the model's own stop token already closes its turn
        return toks

    def _close_active(self) -> None:
        active, self._active = getattr(self, "_active", None), None
        if active is not None:
            active.close()  # runs the turn's finally: it is recorded as interrupted


def tokenize_rendered(model, text: str) -> list[int]:
    """Tokens of a whole rendered chat prompt: special markers parsed, BOS added once.

    The model's BOS is added when its vocabulary asks for it, unless the template already wrote one.
    """
    bos = getattr(model, "bos_id", None)
    toks = list(model.tokenize(text, add_bos=bool(getattr(model, "add_bos_default", False)), special=True))
    if bos is not None and toks[:2] == [bos, bos]:
        toks = toks[1:]  # the template already wrote BOS
    return toks


def _renderer(model, template: Union[str, Renderer, None]) -> Renderer:
    if template is not None and not isinstance(template, str):
        return template
    if template is None:
        own = getattr(model, "chat_template", None)
        if own is None or own() is None:
            name = getattr(getattr(model, "path", None), "name", type(model).__name__)
            raise ChatTemplateMissing(
                f"{name} has no chat template; pass ChatOptions(template=...) (a template string "
                "or a renderer function)"
            )
    apply = getattr(model, "apply_chat_template", None)
    if apply is None:
        raise ChatTemplateMissing(
            f"{type(model).__name__} cannot render template strings; pass a renderer function"
        )

    def render(messages: Sequence[Mapping[str, str]], add_assistant: bool) -> str:
        return apply(messages, add_assistant=add_assistant, template=template)

    return render

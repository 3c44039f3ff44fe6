"""``fucina.LLM``: load a model once, then complete, chat and stream — speculatively by default.

>>> import fucina
>>> llm = fucina.LLM("smollm2-135m")                       # doctest: +SKIP
>>> r = llm.complete("def add(a, b):", max_tokens=64, temperature=0)   # doctest: +SKIP
>>> for chunk in llm.chat([{"role": "user", "content": "Hi"}], stream=True):   # doctest: +SKIP
...     print(chunk.text, end="")

The LLM owns the model, the verify cost table (measured once per machine and cached; progress on
stderr), the speculation index, the sampler and the decoder of each call. Speculation is lossless:
every call returns what plain decoding with the same settings and seed returns (bit for bit on an
*exact* engine, see ``fucina doctor``; ``speculative=False`` decodes plainly through the same calls).

**Stop strings work with speculation here**: each call has its own sampler, so the tokens a verify
batch commits after the token that completes a stop string are simply never shown; the text is cut
at the first stop string exactly where plain decoding would cut it. (:class:`fucina.chat.Conversation`
is stricter, because its sampler carries on into the next turn.)

**Prefix reuse**: the KV cache of the previous call is kept, and a few earlier ones are saved as
snapshots (*prefix slots*, see :mod:`fucina.prefix_cache`); a call whose prompt starts with tokens one of them
holds evaluates only the rest (``usage.cached_tokens``), so interleaved conversations both reuse theirs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence, Union

from fucina.call_settings import CallSettings, Message, Prompt, call_settings, chat_messages, prompt_ids
from fucina.context_size import ContextChoice, requested_context
from fucina.errors import ChatTemplateMissing, ContextLengthExceeded, InvalidOption
from fucina.grammar import sampler_for
from fucina.plain import PlainDecoder
from fucina.prefix_cache import DEFAULT_MAX_BYTES, PrefixCache, check_limit
from fucina.logprobs import LogprobRecorder
from fucina.results import (Completion, CompletionChunk, FinishReason, SpeculationReport,
                            Timings, Usage)
from fucina.sampling import Sampler
from fucina.speculative.index import MAX_REFERENCES  # re-exported: one call's reference limit
from fucina.speculative.costs import CostTable
from fucina.text import TextLoop
from fucina.tool_calls import (HermesParser, ToolSettings, forced_call_grammar, needs_jinja, render_with_tools,
                               tool_settings)
from fucina.tool_calls.stream import collect, tool_chunks

if TYPE_CHECKING:
    from fucina.decoders import DecoderFactory
    from fucina.grammar import Grammar
    from fucina.speculative.crossreq import CrossRequestStore

__all__ = ["LLM", "MAX_REFERENCES"]



class LLM:
    """A local GGUF model with lossless speculative decoding.

    Args:
        model: ``"gemma3-270m"`` (the default, embedded), ``"smollm2-135m"``, a path to any GGUF
            file, or an already loaded model object (anything with the
            :class:`fucina.model_protocol.Model` shape, e.g. :class:`fucina.backends.fake.FakeModel`).
        speculative: the default of every call (each call may override it).
        n_ctx: context length in tokens. Default (None): the context the model was trained on,
            capped by what this machine's memory holds (:mod:`fucina.context_size`;
            :attr:`context_choice` says which and why). Ignored for an already loaded model.
        n_threads: CPU threads (default: every core this process may use).
        exact: load in batch-invariant mode (no CPU weight repacking) and cap drafts where the
            engine stays bitwise (see ``fucina doctor``). Default (None): on when this process
            runs the patched engine (``python -m fucina.engine build``), whose speculative output
            is then bitwise plain decoding's; off on a stock engine (and off when ``repack=True``).
        repack: load the weights into llama.cpp's extra CPU buffer types (weight repacking, and
            AMX where the engine has it; llama.cpp's ``--repack``/``--no-repack``). Default (None):
            off in exact mode and on a CPU with AMX, whose AMX buffer type crashes (llama.cpp
            #20824; said once on stderr), on otherwise. ``True`` cannot be combined with
            ``exact=True``: repacked weights take another kernel for batched rows.
        cost_table: a :class:`CostTable` or the path of one (``fucina calibrate --out``); default:
            the table cached for this model and machine, measured once when missing.
        spec_options: low-level decoder options (:class:`fucina.speculative.decoder.SpecOptions`).
        chat_template: a template (llama.cpp name such as ``"chatml"``, or template text) for models
            that ship none.
        name: the model id reported (default: the short name or the file stem).
        progress: print calibration progress on stderr.
        prefix_cache_bytes: KV-cache snapshots kept between calls, in bytes (default 1 GiB; less if memory is short).

    Raises :class:`~fucina.errors.ModelNotFound`, :class:`~fucina.errors.ModelLoadError` or
    :class:`~fucina.errors.InvalidOption` at construction. One LLM runs one generation at a time;
    calls from several threads wait for each other.
    """

    def __init__(
        self,
        model: Union[str, os.PathLike, Any, None] = None,
        *,
        speculative: bool = True,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        exact: bool | None = None,
        repack: bool | None = None,
        cost_table: Union[CostTable, str, os.PathLike, None] = None,
        spec_options: Any = None,
        chat_template: str | None = None,
        name: str | None = None,
        progress: bool = True,
        prefix_cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not isinstance(speculative, bool):
            raise InvalidOption(f"speculative must be a bool, got {speculative!r}", param="speculative")
        if exact is not None and not isinstance(exact, bool):
            raise InvalidOption(f"exact must be a bool or None, got {exact!r}", param="exact")
        if repack is not None and not isinstance(repack, bool):
            raise InvalidOption(f"repack must be a bool or None, got {repack!r}", param="repack")
        if exact and repack:
            raise InvalidOption("repack=True breaks exact=True: repacked weights take another kernel for "
                                "batched rows", param="repack")
        if chat_template is not None and not isinstance(chat_template, str):
            raise InvalidOption("chat_template must be a string or None", param="chat_template")
        self._progress = progress
        check_limit(prefix_cache_bytes, param="prefix_cache_bytes")  # before the model loads
        if exact is None:
            from fucina.engine_selection import exact_by_default

            exact = False if hasattr(model, "forward_step") or repack else exact_by_default()
        #: Batch-invariant load and draft cap (resolved: True/False).
        self.exact = exact
        self.speculative = speculative
        self.chat_template = chat_template
        if hasattr(model, "forward_step"):
            self.model, prefix_budget = model, prefix_cache_bytes
            self.name = name or type(model).__name__
        else:
            from fucina.catalog import load_model, model_id

            # A chosen context leaves room for the prefix snapshots; the room it set aside is their budget.
            self.model = load_model(None if model is None else str(model), n_ctx=n_ctx, n_threads=n_threads,
                                    use_extra_bufts=False if exact else repack,
                                    reserve_bytes=prefix_cache_bytes if n_ctx is None else 0)
            self.name = name or model_id(model)
            granted = None if n_ctx is not None else self.context_choice.reserve_bytes  # what it set aside
            prefix_budget = prefix_cache_bytes if granted is None else min(prefix_cache_bytes, granted)
        self._lock = threading.Lock()
        self._active: tuple[Iterator, int] | None = None
        #: Builds this LLM's speculative decoders; its AcceptanceModel is shared by every call (and conversation).
        self._decoders: DecoderFactory | None = None
        #: The KV-cache prefix kept between calls (:mod:`fucina.prefix_cache`).
        self.prefix_cache = PrefixCache(self.model, max_bytes=prefix_budget)
        self._cost_source = cost_table
        self._table: CostTable | None = cost_table if isinstance(cost_table, CostTable) else None
        self._spec_options = spec_options
        self._report = None
        if speculative:
            self._prepare_speculation()

    # -- public API ---------------------------------------------------------------------------

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        penalty_last_n: int = 64,
        seed: int | None = None,
        stop: Union[str, Sequence[str], None] = None,
        stop_token_ids: Sequence[int] = (),
        references: Sequence[Union[str, Sequence[int]]] = (),
        speculative: bool | None = None,
        stream: bool = False,
        cross_request: "CrossRequestStore | None" = None,
        grammar: "Grammar | None" = None,
        logprobs: int | None = None,
    ) -> Union[Completion, Iterator[CompletionChunk]]:
        """Continue ``prompt`` (text, whose special-token markers are parsed; or token ids, used as they are).

        Sampling defaults are llama.cpp's (``temperature=0`` is greedy); ``max_tokens=None`` runs
        to an end token or the end of the context. ``seed=None`` draws a fresh seed; give one to
        reproduce a sampled call. ``stop``: strings that end the text (not included).
        ``references``: up to 8 documents (text or token ids) to draft from in this call.
        ``cross_request``: one tenant's :class:`~fucina.speculative.crossreq.CrossRequestIndex` (or
        any store with ``snapshot()`` and ``add(tokens)``): with speculation the call also drafts
        from the earlier calls it holds, and a call that finishes adds its prompt and output to it.
        Never share one between callers who must not learn each other's text (a timing channel).
        ``grammar``: a :class:`fucina.grammar.Grammar` (JSON schema, Lark, regex) every sampled row is
        masked by, verified rows included, so speculative output still equals plain constrained decoding.
        ``logprobs``: None (off), or 0..20 alternatives: every generated token's log-probability under
        the model's raw distribution (before penalties, temperature and the cuts) and the ``logprobs``
        most likely tokens at its position (:mod:`fucina.logprobs`; the same with and without speculation).
        With ``stream=True`` returns an iterator of :class:`CompletionChunk`, else a
        :class:`Completion`. Bad arguments raise :class:`~fucina.errors.InvalidOption` (its ``param``
        names the argument) before any work; a prompt that cannot fit with ``max_tokens`` raises
        :class:`~fucina.errors.ContextLengthExceeded`.
        """
        return self._start(prompt_ids(self.model, prompt), call_settings(self.model, default_speculative=self.speculative,
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            penalty_last_n=penalty_last_n, seed=seed, stop=stop, stop_token_ids=stop_token_ids,
            references=references, speculative=speculative, cross_request=cross_request, grammar=grammar,
            logprobs=logprobs), stream)

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.8,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        penalty_last_n: int = 64,
        seed: int | None = None,
        stop: Union[str, Sequence[str], None] = None,
        stop_token_ids: Sequence[int] = (),
        references: Sequence[Union[str, Sequence[int]]] = (),
        speculative: bool | None = None,
        stream: bool = False,
        cross_request: "CrossRequestStore | None" = None,
        grammar: "Grammar | None" = None,
        logprobs: int | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
    ) -> Union[Completion, Iterator[CompletionChunk]]:
        """The assistant's reply to ``messages`` (``[{"role": ..., "content": ...}, ...]``).

        Rendered with the model's chat template (or ``chat_template``); a model with neither raises
        :class:`~fucina.errors.ChatTemplateMissing`. Content may be a string or a list of
        ``{"type": "text", "text": ...}`` parts. Other arguments as in :meth:`complete`.
        ``tools``/``tool_choice``/``parallel_tool_calls`` as in OpenAI's API (:mod:`fucina.tool_calls`):
        the tools reach the model through its own template, and the calls it writes (Hermes
        ``<tool_call>`` format) come back as ``tool_calls`` (chunks: deltas), finish reason ``tool_calls``.
        """
        tool = tool_settings(tools, tool_choice, parallel_tool_calls)
        ids = self._encode_chat(messages, tool)
        settings = call_settings(self.model, default_speculative=self.speculative,
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            penalty_last_n=penalty_last_n, seed=seed, stop=stop, stop_token_ids=stop_token_ids,
            references=references, speculative=speculative, cross_request=cross_request,
            grammar=forced_call_grammar(tool, grammar), logprobs=logprobs)
        if not tool.offered:
            return self._start(ids, settings, stream)
        chunks = tool_chunks(self._start(ids, settings, True), HermesParser(names=[t.name for t in tool.tools]))
        return chunks if stream else collect(chunks)

    def conversation(self, **options: Any):
        """A multi-turn :class:`fucina.chat.Conversation` on this LLM's model and cost table.

        ``options`` are :class:`fucina.chat.ChatOptions` fields (``speculation`` defaults to this
        LLM's ``speculative``). With this LLM's decoder options (no ``spec_options`` given) the
        conversation's drafting policy learns in the same acceptance model as this LLM's calls.
        The conversation owns the KV cache from now on: a later :meth:`complete` or :meth:`chat`
        starts from an empty cache.
        """
        from fucina.chat import ChatOptions, Conversation

        self._close_active()
        options.setdefault("speculation", self.speculative)
        if self.chat_template is not None:
            options.setdefault("template", self.chat_template)
        acceptance = None
        if options["speculation"]:
            if "spec_options" not in options:
                acceptance = self._factory().acceptance  # what this LLM's calls learned, and go on learning
            self._prepare_speculation()
            options.setdefault("cost_table", self._table)
            options.setdefault("spec_options", self._decoder_options())
            options.setdefault("clock", time.perf_counter)
        with self._lock:
            self.prefix_cache.invalidate()
        return Conversation(self.model, ChatOptions(**options), acceptance=acceptance)

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return list(self.model.tokenize(text, add_bos=add_bos, special=special))

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``."""
        return self.model.detokenize(list(tokens))

    @property
    def context_length(self) -> int:
        return int(self.model.context_length)

    @property
    def context_choice(self) -> ContextChoice:
        """The context the model runs with and why (the model's trained context, a memory cap, or asked for)."""
        choice = getattr(self.model, "context_choice", None)
        return choice if choice is not None else requested_context(self.context_length)

    @property
    def level(self) -> str:
        """``"exact"`` or ``"distribution"``: the losslessness level speculation holds here.

        Measured once per model, engine build and machine (``fucina doctor``), then cached.
        """
        self._prepare_speculation()
        from fucina.doctor import level_for

        return level_for(self._report, self._max_draft())

    @property
    def cost_table(self) -> CostTable:
        """The verify cost table speculation prices drafts with (loaded or measured on first use)."""
        self._prepare_speculation()
        assert self._table is not None
        return self._table

    def close(self) -> None:
        """Free the model (a loaded GGUF's memory); the LLM cannot be used afterwards."""
        self._close_active()
        close = getattr(self.model, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLM({self.name!r}, speculative={self.speculative}, n_ctx={self.context_length})"

    # -- encoding --------------------------------------------------------------------------------

    def _encode_chat(self, messages: Sequence[Message], tools: ToolSettings | None = None) -> list[int]:
        msgs = chat_messages(messages)
        from fucina.chat import tokenize_rendered

        if needs_jinja(msgs, tools):  # tools, tool calls, tool results: the template's own Jinja
            return tokenize_rendered(self.model, render_with_tools(self.model, msgs, tools, override=self.chat_template))
        return tokenize_rendered(self.model, self._render(msgs))

    def _render(self, msgs: list[dict[str, str]]) -> str:
        own = getattr(self.model, "chat_template", None)
        if self.chat_template is None and (own is None or own() is None):
            raise ChatTemplateMissing(
                f"{self.name} has no chat template; use complete(), or pass LLM(chat_template=...)",
                param="messages")
        apply = getattr(self.model, "apply_chat_template", None)
        if apply is None:
            raise ChatTemplateMissing(f"{type(self.model).__name__} cannot render chat templates", param="messages")
        return apply(msgs, add_assistant=True, template=self.chat_template)

    def _check_fits(self, prompt: list[int], req: CallSettings) -> None:
        n_ctx = self.context_length
        need = len(prompt) + (req.max_tokens or 1)
        if need > n_ctx:
            what = f" + max_tokens {req.max_tokens}" if req.max_tokens else " + 1 generated token"
            raise ContextLengthExceeded(
                f"the prompt's {len(prompt)} tokens{what} exceed the model's context of {n_ctx} tokens",
                param="max_tokens" if req.max_tokens and len(prompt) < n_ctx else "prompt",
                n_ctx=n_ctx, prompt_tokens=len(prompt), max_tokens=req.max_tokens or None)

    # -- speculation setup -----------------------------------------------------------------------

    def _prepare_speculation(self) -> None:
        """Load (or measure once) the cost table and the engine's invariance report."""
        if self._table is not None and self._report is not None:
            return
        from fucina.calibrate import load_or_calibrate
        from fucina.doctor import cached_report

        with self._lock:
            if self._table is None:
                path = None if self._cost_source is None else Path(self._cost_source)
                self._table = load_or_calibrate(self.model, path, self._print_progress if self._progress else None)
            if self._report is None:
                self._report = cached_report(self.model)
            self.prefix_cache.invalidate()  # both may have run forwards: the cache is no longer the last call's

    @staticmethod
    def _print_progress(i: int, n: int) -> None:
        print(f"\rcalibrating verify costs for this machine (once): {i}/{n}", end="", file=sys.stderr, flush=True)
        if i == n:
            # Best of 2: on a 2-core EPYC its points vary about 10% from run to run (BENCHMARKS.md).
            print("\na quick table, cached; `fucina calibrate MODEL` measures a steadier one (best of 5)",
                  file=sys.stderr)

    def _max_draft(self) -> int:
        return self._decoder_options().policy.max_draft

    def _decoder_options(self):
        from fucina.decoders import decoder_options

        return decoder_options(self._spec_options, exact=self.exact, report=self._report)

    def _factory(self) -> "DecoderFactory":
        """The factory of this LLM's speculative decoders (built once speculation is prepared)."""
        self._prepare_speculation()
        if self._decoders is None:
            from fucina.decoders import DecoderFactory, SpeculationOptions

            assert self._table is not None
            # One per LLM: each call starts from what earlier calls learned of the sources' acceptance.
            self._decoders = DecoderFactory(self.model, SpeculationOptions(
                cost_table=self._table, decoder=self._decoder_options(), clock=time.perf_counter))
        return self._decoders

    def _decoder(self, sampler: Sampler, req: CallSettings):
        if not req.speculative:
            return PlainDecoder(self.model, sampler)
        return self._factory().decoder(sampler, references=req.references, cross_request=req.cross_request)

    # -- generation ------------------------------------------------------------------------------

    def _start(self, prompt: list[int], req: CallSettings, stream: bool):
        self._check_fits(prompt, req)
        if req.speculative:
            self._prepare_speculation()
        # A stream of this thread still open would hold the lock forever: it ends here (as if closed).
        self._close_active()
        chunks = self._generate(prompt, req)
        self._active = (chunks, threading.get_ident())
        if stream:
            return chunks
        return collect(chunks)

    def _generate(self, prompt: list[int], req: CallSettings) -> Iterator[CompletionChunk]:
        with self._lock:
            try:
                yield from self._locked_generate(prompt, req)
            finally:
                if self._active is not None and self._active[1] == threading.get_ident():
                    self._active = None

    def _locked_generate(self, prompt: list[int], req: CallSettings) -> Iterator[CompletionChunk]:
        model = self.model
        t0 = time.perf_counter()
        # 1. Reuse the cached prefix: keep the KV rows the previous call left that match this prompt.
        reused = self.prefix_cache.reuse(prompt)
        decoder = self._decoder(sampler_for(model, req.sampler, req.grammar), req)
        try:
            decoder.adopt(prompt[:reused])
            decoder.feed(prompt[reused:])
        except BaseException:
            self.prefix_cache.forget()
            raise
        t_fed = time.perf_counter()
        # 2. Decode up to the budget; the end tokens are checked inside the verify loop.
        room = model.context_length - model.kv_len
        budget = room if req.max_tokens is None else min(req.max_tokens, room)
        stop_ids = frozenset(int(t) for t in model.eos_ids) | req.stop_token_ids
        text = TextLoop(model, stop_ids=stop_ids, stop_strings=req.stop, clock=time.perf_counter)
        lp = None if req.logprobs is None else LogprobRecorder(model, req.logprobs, stop_ids).attach(decoder)
        tokens = decoder.generate(budget, stop_ids)
        try:
            # 3. Text as the tokens commit, cut at a stop string; held-back bytes are flushed at the end.
            for piece in text.run(tokens):
                entries = None if lp is None else lp.take(piece.token_ids)
                yield CompletionChunk(piece.text, piece.token_ids, logprobs=entries)
        finally:
            tokens.close()
            self.prefix_cache.settle(decoder.history)
        t_end = time.perf_counter()
        generated = text.tokens
        if req.cross_request is not None:
            # A finished call is what the next ones may repeat: prompt and output, as committed.
            req.cross_request.add(prompt + generated)
        finish: FinishReason = "length" if text.ended_by is None else "stop"
        timings = Timings(t_fed - t0, (text.first_token_at or t_end) - t0, t_end - t_fed, len(generated))
        usage = Usage(len(prompt), len(generated), reused)
        yield CompletionChunk("", text.unsent, finish, usage, timings, self._speculation_report(decoder),
                              logprobs=None if lp is None else lp.take(text.unsent))

    def reset(self) -> None:
        """Empty the model's KV cache (e.g. after an engine fault); saved prefix slots stay."""
        self.prefix_cache.forget()

    def prefix_slots(self) -> list[tuple[int, int]]:
        """``(tokens, bytes)`` of each saved prefix slot, least recently used first (lock-free)."""
        return self.prefix_cache.slots()

    def _speculation_report(self, decoder) -> SpeculationReport | None:
        stats = getattr(decoder, "stats", None)
        if stats is None:
            return None
        from fucina.doctor import level_for

        sources = decoder.source.stats().sources
        return SpeculationReport(stats.steps, stats.verifies, stats.drafted, stats.accepted, stats.committed,
                                 str(decoder.policy), sources, level_for(self._report, self._max_draft()),
                                 source_fault=stats.source_fault)

    def _close_active(self) -> None:
        active = self._active
        if active is not None and active[1] == threading.get_ident():
            active[0].close()

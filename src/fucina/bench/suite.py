"""The benchmark suite behind ``fucina bench``: the methods, the peer and the interleaved runner.

Task files: :mod:`fucina.bench.tasks` (its names are re-exported here for the bench's tools).

For every task, in one process, each repeat runs every method in :data:`~fucina.bench.report.METHODS`
order (plain first: the oracle drafts plain's output and identity is checked against it), so slow
machine drift hits all methods alike. Each run is timed in two parts: prefill (``feed``) and
generation (``generate``); only generation enters tokens/s.

Sampling (ours, every fucina method): temperature 0 is greedy (argmax, no penalties); a task with
temperature T > 0 samples with T, top-k 40, top-p 0.95, min-p off, no penalties, seed 0 — a fresh
sampler per run, so every repeat draws the same stream. The peer's settings are at :class:`LlamaPeer`.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from fucina.bench.report import METHODS, Divergence, RunRecord
from fucina.bench.tasks import Task, TaskFileError, load_tasks, parse_tasks, select_tasks  # noqa: F401 (re-exported)
from fucina.decoders import DecoderFactory, SpeculationOptions
from fucina.errors import FucinaError, InvalidOption
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.index import CascadeOptions
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.policy import PolicyOptions
from fucina.speculative.topk import top2_gap
from fucina.speculative.costs import CostTable
from fucina.speculative.scripted import ScriptedSource

TOP_K = 40
TOP_P = 0.95
SEED = 0
PEER_METHODS: dict[str, int | None] = {"peer": None, "peer_n2": 2}  # name -> num_pred_tokens (None: default)
#: Methods that decode plainly: the reference, and its A/A repeat that measures the run's own noise.
PLAIN_METHODS = frozenset({"plain", "plain_again"})
SAMPLING_NOTE = (f"temperature 0 = greedy (argmax, no penalties); temperature T > 0 = sampled with T, "
                 f"top-k {TOP_K}, top-p {TOP_P}, seed {SEED} (fresh sampler per run)")
PEER_NOTE = ("llama_cpp.Llama(draft_model=LlamaPromptLookupDecoding(...)) on the same GGUF, n_ctx, n_batch, "
             "threads and extra buffer types (swa_full=True; draft_model forces logits_all), fed our prompt token ids through "
             "Llama.generate; greedy: temp=0, i.e. llama.cpp's greedy (argmax) sampler with neutral penalties; "
             f"sampled: temp=T, top_k={TOP_K}, top_p={TOP_P}, min_p=0, typical_p=1, seed {SEED} (llama.cpp applies "
             "top-k/top-p before temperature, so sampled peer output is not expected to equal ours); "
             "its prefill = time to its first token")

Clock = Callable[[], float]


def match_only(cascade: CascadeOptions, policy: PolicyOptions) -> tuple[CascadeOptions, PolicyOptions]:
    """The ``match_only`` ablation of given options: drafts priced on match length alone (no fork
    flags or word pieces, no resume or realign source, no rewrite rules, sampled and greedy generations learned
    together). ``fucina bench
    --methods match_only`` and ``python -m benchmarks.replay --match-only`` both take it from here."""
    return (replace(cascade, forks=False, resume=False, realign=False, rewrite=False),
            replace(policy, split_sampled=False, word_pieces=False))


def sampler_options(temperature: float) -> SamplerOptions:
    """Our sampler for a task (see the module docstring)."""
    if temperature <= 0:
        return SamplerOptions()
    return SamplerOptions(temperature=temperature, top_k=TOP_K, top_p=TOP_P, seed=SEED)


def encode_prompt(model, text: str) -> list[int]:
    """The prompt through the model's chat template when it has one, raw otherwise.

    Same rule as :func:`benchmarks.exactness.encode`, but tolerant of models without the
    template API (the fake model), which count as "no template".
    """
    template = getattr(model, "chat_template", None)
    if callable(template) and template() is not None:
        rendered = model.apply_chat_template([{"role": "user", "content": text}])
        return model.tokenize(rendered, add_bos=False, special=True)
    return model.tokenize(text, add_bos=getattr(model, "add_bos_default", True))


def validate_methods(methods: Sequence[str]) -> list[str]:
    """Known, de-duplicated methods in interleaving order; plain is always added (it is the baseline)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InvalidOption(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    chosen = set(methods) | {"plain"}
    return [m for m in METHODS if m in chosen]


# -- the peer ---------------------------------------------------------------------------------------

@dataclass
class PeerRun:
    """One peer generation: its tokens, timings and draft accounting."""

    tokens: list[int]
    prefill_s: float
    gen_s: float
    steps: int
    verifies: int
    drafted: int
    accepted: int


class PeerEngine(Protocol):
    """A competing speculative decoder run on the same prompt token ids."""

    def run(self, prompt: Sequence[int], max_tokens: int, stops: frozenset[int], options: SamplerOptions,
            num_pred_tokens: int | None, clock: Clock) -> PeerRun: ...

    def close(self) -> None: ...


class _CountingDraft:
    """Wraps a llama-cpp-python draft model and logs each draft with the position it predicts."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids, /, **kwargs):
        draft = self.inner(input_ids, **kwargs)
        # input_ids is the committed stream through the newest token; the draft continues it.
        self.calls.append((len(input_ids), [int(t) for t in draft]))
        return draft


def peer_accounting(calls: Sequence[tuple[int, Sequence[int]]], stream: Sequence[int],
                    n_tokens: int) -> tuple[int, int, int, int]:
    """(steps, verifies, drafted, accepted) of a peer run from its logged drafts.

    Each draft call is followed by exactly one forward, plus the prefill step that produced the
    first token. A drafted token counts as accepted while it matches the final stream.
    """
    drafted = accepted = verifies = 0
    for pos, draft in calls:
        if not draft:
            continue
        verifies += 1
        drafted += len(draft)
        for i, t in enumerate(draft):
            if pos + i >= len(stream) or stream[pos + i] != t:
                break
            accepted += 1
    steps = len(calls) + 1 if n_tokens else 0
    return steps, verifies, drafted, accepted


class PeerUnavailable(FucinaError):
    """The peer cannot be loaded with the model parameters ours has (the runner skips it, saying why)."""


@contextlib.contextmanager
def _model_params(*, use_extra_bufts: bool) -> Iterator[None]:
    """While it is open, llama-cpp-python's ``Llama`` builds its model params with ``use_extra_bufts``.

    ``Llama(...)`` takes no such argument: it starts from ``llama_model_default_params()`` (looked up
    on ``llama_cpp.llama_cpp`` when called), sets the fields it exposes and hands the struct to
    llama.cpp. So for the constructor only, that function returns the defaults with the choice made,
    and :class:`LlamaPeer` checks ``Llama.model_params`` afterwards.
    """
    import llama_cpp.llama_cpp as ll

    defaults = ll.llama_model_default_params

    def with_choice():
        params = defaults()
        params.use_extra_bufts = use_extra_bufts
        return params

    with _PARAMS_LOCK:
        ll.llama_model_default_params = with_choice
        try:
            yield
        finally:
            ll.llama_model_default_params = defaults


_PARAMS_LOCK = threading.Lock()


class LlamaPeer:
    """The peer: llama-cpp-python's high-level ``Llama`` with ``LlamaPromptLookupDecoding``.

    Loaded once per model (same GGUF, n_ctx, n_batch, threads and ``use_extra_bufts`` as ours — so no
    AMX buffer where ours has none (:mod:`fucina.cpu`) — ``swa_full=True`` like
    ours so Gemma 3's sliding-window cache can rewind; ``logits_all=True``, which its verify path needs:
    without it the scores buffer holds only n_batch rows and prompts longer than n_batch crash), and
    reset before every run. Drafting: ``LlamaPromptLookupDecoding()`` with its defaults
    (max_ngram_size=2, num_pred_tokens=10), or ``num_pred_tokens=N``.

    Sampling through ``Llama.generate``: greedy tasks pass ``temp=0.0``, which makes llama.cpp's
    chain penalties(no-op at repeat 1.0 / freq 0 / presence 0) + ``greedy`` — a true argmax; the
    generate() defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05) are NOT used. Sampled tasks
    pass temp=T, top_k=40, top_p=0.95, min_p=0.0, typical_p=1.0 and seed 0 (``set_seed(0)``: the
    constructor maps seed 0 to "random"); llama.cpp's chain applies top-k/top-p before temperature,
    so its sampled distribution is not ours and identity is not expected there.
    Prefill = time to the first token (prompt eval + first sample); generation = the rest.
    """

    def __init__(self, model_path: str | Path, n_ctx: int, n_threads: int, n_batch: int = 512, *,
                 use_extra_bufts: bool = True) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self._lookup = LlamaPromptLookupDecoding
        with _model_params(use_extra_bufts=use_extra_bufts):
            self.llm = Llama(model_path=str(model_path), n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads,
                             n_threads_batch=n_threads, swa_full=True, draft_model=LlamaPromptLookupDecoding(),
                             logits_all=True, verbose=False)
        # Llama keeps the params it passed to llama.cpp: the choice must be in them.
        if bool(self.llm.model_params.use_extra_bufts) != use_extra_bufts:  # pragma: no cover - another release
            self.close()
            raise PeerUnavailable(f"llama-cpp-python's Llama ignored use_extra_bufts={use_extra_bufts}")

    @classmethod
    def for_model(cls, model) -> "LlamaPeer":
        """A peer over the same GGUF, context settings and weight buffers as a loaded :class:`LlamaModel`."""
        opts = getattr(model, "options", None)
        # Headroom: llama-cpp-python's generate() does not bound prompt-lookup drafts by the context
        # and crashes when prompt + output + draft pass n_ctx; our decoder caps drafts itself.
        return cls(model.path, model.context_length + 64, model.n_threads, getattr(opts, "n_batch", 512),
                   use_extra_bufts=bool(getattr(opts, "use_extra_bufts", True)))

    def run(self, prompt: Sequence[int], max_tokens: int, stops: frozenset[int], options: SamplerOptions,
            num_pred_tokens: int | None, clock: Clock = time.perf_counter) -> PeerRun:
        draft = self._lookup() if num_pred_tokens is None else self._lookup(num_pred_tokens=num_pred_tokens)
        counter = _CountingDraft(draft)
        llm = self.llm
        llm.draft_model = counter  # generate() reads the attribute each step
        llm.reset()
        llm.set_seed(SEED)
        if options.greedy:
            kw = dict(temp=0.0)
        else:
            kw = dict(temp=options.temperature, top_k=options.top_k, top_p=options.top_p, min_p=0.0,
                      typical_p=1.0)
        kw.update(repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)
        out: list[int] = []
        gc.collect()
        t0 = clock()
        t1 = t2 = t0
        stream = llm.generate(list(prompt), reset=True, **kw)
        try:
            for tok in stream:
                if not out:
                    t1 = clock()
                out.append(int(tok))
                if tok in stops or len(out) >= max_tokens:
                    break
            t2 = clock()
        finally:
            stream.close()
        steps, verifies, drafted, accepted = peer_accounting(counter.calls, [*prompt, *out], len(out))
        return PeerRun(out, t1 - t0, t2 - t1, steps, verifies, drafted, accepted)

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if close is not None:
            close()


# -- the runner -------------------------------------------------------------------------------------

#: Called after each run with (task, method, repeat).
Progress = Callable[[Task, str, int], None]


@dataclass
class SuiteResult:
    runs: list[RunRecord] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)


@dataclass
class _Prepared:
    task: Task
    prompt: list[int]
    refs: list[list[int]]
    options: SamplerOptions


def prepare(model, tasks: Sequence[Task]) -> list[_Prepared]:
    """Tokenize prompts and references; raises InvalidOption when a task cannot fit the context."""
    out = []
    for t in tasks:
        prompt = encode_prompt(model, t.prompt)
        need = len(prompt) + t.gen
        if need > model.context_length:
            raise InvalidOption(f"task {t.id} needs {len(prompt)} prompt + {t.gen} generated tokens, more than "
                                f"the context of {model.context_length}; raise --ctx or lower --gen")
        refs = [model.tokenize(r, add_bos=False) for r in t.references]
        out.append(_Prepared(t, prompt, [r for r in refs if r], sampler_options(t.temperature)))
    return out


def method_decoders(model, method: str, cost_table: CostTable, policy: PolicyOptions | None = None) -> DecoderFactory:
    """The decoder factory of a speculative ``method``: ``fucina`` is the product's (an LLM's with
    the same cost table and draft cap, :mod:`fucina.decoders`); the others are its ablations."""
    pol = policy or PolicyOptions()
    cascade = CascadeOptions()
    if method == "sam_only":
        cascade = CascadeOptions(recycling=False)
    elif method == "match_only":
        cascade, pol = match_only(cascade, pol)
    elif method == "no_pieces":
        pol = replace(pol, word_pieces=False)
    elif method == "no_realign":
        cascade = CascadeOptions(realign=False)
    elif method == "no_rewrite":
        cascade = CascadeOptions(rewrite=False)
    decoder = SpecOptions(policy=pol, verify_all=method == "gate_open")
    return DecoderFactory(model, SpeculationOptions(cost_table=cost_table, decoder=decoder, cascade=cascade))


def method_decoder(decoders: DecoderFactory, method: str, sampler: Sampler, refs: Sequence[Sequence[int]],
                   plain_stream: Sequence[int]) -> SpeculativeDecoder:
    """One run's decoder: the oracle drafts plain's own output, ``sam_only`` has no references."""
    if method == "oracle":
        return decoders.decoder(sampler, source=ScriptedSource(plain_stream, decoders.model.vocab_size, mode="perfect"))
    return decoders.decoder(sampler, references=() if method == "sam_only" else refs)


def _extra(decoder: SpeculativeDecoder) -> dict:
    forwards = sorted(decoder.stats.forwards.items())
    extra: dict = {"policy": decoder.policy.summary(),
                   "forwards": {str(rows): [int(n), round(sec, 6)] for rows, (n, sec) in forwards}}
    stats = getattr(decoder.source, "stats", None)
    if callable(stats):
        extra["sources"] = {s.name: [s.accepted, s.drafted] for s in stats().sources}
    return extra


def _run_ours(model, p: _Prepared, method: str, decoders: DecoderFactory | None, plain_stream: Sequence[int],
              clock: Clock, model_name: str, repeat: int) -> tuple[RunRecord, list[int]]:
    stops = frozenset(model.eos_ids)
    model.reset()
    s0 = clock()
    sampler = Sampler(p.options)
    if decoders is None:
        decoder = PlainDecoder(model, sampler)
    else:
        decoder = method_decoder(decoders, method, sampler, p.refs, plain_stream)
    setup = clock() - s0
    gc.collect()  # same starting heap for every method; collection stays on during the run
    t0 = clock()
    decoder.feed(p.prompt)
    t1 = clock()
    out = list(decoder.generate(p.task.gen, stops))
    t2 = clock()
    model.reset()
    rec = RunRecord(model=model_name, task_id=p.task.id, group=p.task.group, kind=p.task.kind,
                    temperature=p.task.temperature, method=method, repeat=repeat, prompt_tokens=len(p.prompt),
                    tokens=len(out), prefill_s=t1 - t0, gen_s=t2 - t1, setup_s=setup,
                    stop="stop" if out and out[-1] in stops else "length")
    if method in PLAIN_METHODS:
        rec.steps = len(out)
    else:
        s = decoder.stats
        rec.steps, rec.verifies, rec.drafted, rec.accepted = s.steps, s.verifies, s.drafted, s.accepted
        rec.extra = _extra(decoder)
    return rec, out


def _run_peer(peer: PeerEngine, model, p: _Prepared, method: str, clock: Clock, model_name: str,
              repeat: int) -> tuple[RunRecord, list[int]]:
    stops = frozenset(model.eos_ids)
    r = peer.run(p.prompt, p.task.gen, stops, p.options, PEER_METHODS[method], clock)
    rec = RunRecord(model=model_name, task_id=p.task.id, group=p.task.group, kind=p.task.kind,
                    temperature=p.task.temperature, method=method, repeat=repeat, prompt_tokens=len(p.prompt),
                    tokens=len(r.tokens), prefill_s=r.prefill_s, gen_s=r.gen_s, steps=r.steps,
                    verifies=r.verifies, drafted=r.drafted, accepted=r.accepted,
                    stop="stop" if r.tokens and r.tokens[-1] in stops else "length")
    return rec, r.tokens


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where ``a`` and ``b`` differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class _RowTap:
    """Sampler wrapper: records plain's top-2 at chosen positions (the exactness audit's trick)."""

    def __init__(self, sampler: Sampler, positions: Iterable[int]) -> None:
        self.sampler = sampler
        self.positions = set(positions)
        self.top2: dict[int, tuple[int, int, float]] = {}  # position -> (top1, top2, gap)
        self._i = 0

    def sample(self, row: np.ndarray, history: Sequence[int]) -> int:
        if self._i in self.positions:
            self.top2[self._i] = top2_gap(row)
        self._i += 1
        return self.sampler.sample(row, history)


def _capture_gaps(model, p: _Prepared, positions: Iterable[int]) -> tuple[list[int], dict[int, tuple[int, int, float]]]:
    """An untimed plain run that records plain's top-2 logits at ``positions``."""
    model.reset()
    tap = _RowTap(Sampler(p.options), positions)
    d = PlainDecoder(model, tap)  # PlainDecoder only ever calls .sample
    d.feed(p.prompt)
    out = list(d.generate(p.task.gen, frozenset(model.eos_ids)))
    model.reset()
    return out, tap.top2


def run_suite(model, tasks: Sequence[Task], *, model_name: str, cost_table: CostTable,
              methods: Sequence[str] = METHODS, repeats: int = 3, peer: PeerEngine | None = None,
              progress: Progress | None = None, on_task: Callable[[SuiteResult], None] | None = None,
              clock: Clock = time.perf_counter, policy: PolicyOptions | None = None) -> SuiteResult:
    """Run every task: for each repeat, every method once, in :data:`METHODS` order.

    ``model`` is anything with the :class:`fucina.model_protocol.Model` shape (the fake model in tests).
    Peer methods need ``peer``. Greedy runs that differ from plain get a :class:`Divergence` with
    plain's top-2 logit gap there, captured afterwards by one untimed plain run per task.
    ``on_task`` sees the result so far after each task (checkpointing between timed runs).
    """
    methods = validate_methods(methods)
    if repeats < 1:
        raise InvalidOption(f"repeats must be >= 1, got {repeats}")
    if peer is None and any(m in PEER_METHODS for m in methods):
        raise InvalidOption("peer methods need a peer engine")
    result = SuiteResult()
    # One decoder factory (so one acceptance model) per method for the whole suite, as one LLM keeps across its calls.
    factories = {m: method_decoders(model, m, cost_table, policy) for m in methods
                 if m not in PLAIN_METHODS and m not in PEER_METHODS}
    for p in prepare(model, tasks):
        pending: list[tuple[RunRecord, list[int], list[int]]] = []  # diverged greedy runs
        for repeat in range(repeats):
            plain_out: list[int] = []
            for method in methods:
                if method in PEER_METHODS:
                    rec, out = _run_peer(peer, model, p, method, clock, model_name, repeat)
                else:
                    rec, out = _run_ours(model, p, method, factories.get(method), [*p.prompt, *plain_out], clock,
                                         model_name, repeat)
                if method == "plain":
                    plain_out = out
                rec.first_diff = first_difference(plain_out, out)
                rec.identical = rec.first_diff is None
                if not rec.identical and p.task.greedy:
                    pending.append((rec, out, plain_out))
                result.runs.append(rec)
                if progress is not None:
                    progress(p.task, method, repeat)
        if pending:
            result.divergences += _divergences(model, p, pending)
        if on_task is not None:
            on_task(result)
    return result


def _divergences(model, p: _Prepared, pending) -> list[Divergence]:
    positions = {rec.first_diff for rec, _, _ in pending}
    ref_out, top2 = _capture_gaps(model, p, positions)
    out = []
    for rec, method_out, plain_out in pending:
        i = rec.first_diff
        reproduced = ref_out[: i + 1] == plain_out[: i + 1]
        mt = method_out[i] if i < len(method_out) else None
        d = Divergence(model=rec.model, task_id=rec.task_id, group=rec.group, method=rec.method,
                       repeat=rec.repeat, temperature=rec.temperature, position=i,
                       plain_token=plain_out[i] if i < len(plain_out) else -1, method_token=mt,
                       plain_reproduced=reproduced)
        if i in top2 and reproduced and i < len(plain_out):
            a, b, gap = top2[i]
            d.top2_gap, d.runner_up = gap, (mt == b)
        out.append(d)
    return out

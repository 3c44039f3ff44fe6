"""Constrained decoding: a grammar masks every row the sampler draws from (llguidance underneath).

The contract that keeps speculation lossless under a grammar (docs/design.md §2):

    masked(row) = row where the grammar allows the token, -inf elsewhere
    token       = the full sampler pipeline on masked(row)        (one uniform draw, as unconstrained)
    then the grammar consumes the token.

Both decoders sample only rows whose token they commit (the verify loop stops at the first
mismatch), so the grammar state always follows the committed stream, verified rows included: a
draft token the grammar forbids has probability 0 on its row and is rejected, and the committed
stream is exactly plain constrained decoding's — greedy and sampled, at the level the engine holds.
When a verify fails mid-way (the forward or the sampler raises) the decoder drops the rows it
sampled from ``history``; :class:`ConstrainedSampler` sees the shorter history on its next call and
rolls the grammar back by as many tokens.

Where the grammar admits one continuation only (JSON punctuation, a schema's keys, a forced
prefix) :meth:`GrammarState.forced` gives those tokens: a free draft
(:class:`fucina.speculative.grammar_drafts.GrammarDrafts`).

JSON is generated in one fixed layout, ``{"key": value, "key": value}`` (``json.dumps``'s default
separators, no other whitespace): a fixed layout is what makes keys and punctuation forced, and it is
the layout instruct models write by themselves. A schema's ``x-guidance`` options override it.
"""

from __future__ import annotations

import functools
import json
import weakref
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from fucina.errors import GrammarViolation, InvalidGrammar
from fucina.sampling import Sampler, SamplerOptions

__all__ = ["ConstrainedSampler", "Grammar", "GrammarState", "JSON_LAYOUT", "sampler_for"]

#: llguidance JSON-compiler defaults: one fixed layout (see the module docstring).
JSON_LAYOUT: Mapping[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

GrammarKind = Literal["json_schema", "lark", "regex"]


@dataclass(frozen=True)
class Grammar:
    """What the generated text must match: a JSON schema, a Lark grammar or a regex.

    Build one with :meth:`json_schema`, :meth:`json_object`, :meth:`lark` or :meth:`regex`; each
    checks the source at once and raises :class:`~fucina.errors.InvalidGrammar` whose ``param`` is
    ``param`` (the request field a server names in its 400).
    """

    kind: GrammarKind
    #: The schema as JSON text, the Lark grammar or the regex.
    source: str
    param: str = "grammar"

    def __post_init__(self) -> None:
        if self.kind not in ("json_schema", "lark", "regex"):
            raise InvalidGrammar(f"grammar kind must be json_schema, lark or regex, got {self.kind!r}",
                                 param=self.param)
        if not isinstance(self.source, str):
            raise InvalidGrammar(f"the {self.kind} source must be a string", param=self.param)
        self.compiled()  # validate now, before any work

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any] | str, *, param: str = "grammar") -> "Grammar":
        """Output is one JSON value valid against ``schema`` (a dict or its JSON text)."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise InvalidGrammar(f"the JSON schema is not valid JSON: {exc}", param=param) from None
        if not isinstance(schema, Mapping) and not isinstance(schema, bool):
            raise InvalidGrammar(f"a JSON schema must be an object, got {type(schema).__name__}", param=param)
        try:
            text = json.dumps(schema)  # key order kept: properties are generated in it
        except (TypeError, ValueError) as exc:
            raise InvalidGrammar(f"the JSON schema cannot be serialized: {exc}", param=param) from None
        return cls("json_schema", text, param)

    @classmethod
    def json_object(cls, *, param: str = "grammar") -> "Grammar":
        """Output is one JSON object (OpenAI's ``response_format: json_object``)."""
        return cls.json_schema({"type": "object"}, param=param)

    @classmethod
    def lark(cls, grammar: str, *, param: str = "grammar") -> "Grammar":
        """Output matches a Lark grammar in llguidance's dialect (``%json {...}`` embeds a schema)."""
        return cls("lark", grammar, param)

    @classmethod
    def regex(cls, pattern: str, *, param: str = "grammar") -> "Grammar":
        """Output matches ``pattern`` in full."""
        return cls("regex", pattern, param)

    def compiled(self) -> str:
        """The llguidance grammar text (validated; cached per source)."""
        text, error = _compile(self.kind, self.source)
        if error is not None:
            raise InvalidGrammar(f"invalid {self.kind.replace('_', ' ')}: {error}", param=self.param)
        return text


@functools.lru_cache(maxsize=256)
def _compile(kind: str, source: str) -> tuple[str, str | None]:
    """``(grammar text, None)``, or ``("", why it is invalid)``: the library's verdict on one source."""
    from llguidance import LLMatcher

    try:
        if kind == "json_schema":
            text = LLMatcher.grammar_from_json_schema(source, defaults=dict(JSON_LAYOUT))
        elif kind == "lark":
            text = LLMatcher.grammar_from_lark(source)
        else:
            text = LLMatcher.grammar_from_regex(source)
    except ValueError as exc:
        return "", str(exc)
    is_error, messages = LLMatcher.validate_grammar_with_warnings(text)
    return ("", "; ".join(messages)) if is_error else (text, None)


# -- the model's vocabulary, as the constraint library sees it ---------------------------------------

_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


class _Vocabulary:
    """The duck-typed tokenizer llguidance's ``TokenizerWrapper`` reads: one byte string per id.

    A token whose piece is empty (BOS, EOS, chat control tokens: the backends render them so) is a
    special token to the grammar: it never matches text, and the end tokens close the grammar.
    """

    def __init__(self, model) -> None:
        eos = sorted(int(t) for t in model.eos_ids)
        self.eos_token_id = eos[0] if eos else None
        self.bos_token_id = None
        self.eos_ids = eos
        self.tokens = []
        self.special_token_ids = []
        for t in range(model.vocab_size):
            piece = model.token_bytes(t)
            if not piece:
                piece = b"\xff<|fucina-special-%d|>" % t
                self.special_token_ids.append(t)
            self.tokens.append(piece)
        self._model = model

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return list(self._model.tokenize(text, add_bos=False))


def _tokenizer(model):
    """llguidance's tokenizer for ``model``, built once per model object (about a second on 256k tokens)."""
    tok = _TOKENIZERS.get(model)
    if tok is None:
        from llguidance import LLTokenizer, TokenizerWrapper

        vocab = _Vocabulary(model)
        if vocab.eos_token_id is None:
            raise InvalidGrammar("this model has no end token, so a grammar could never end", param="grammar")
        tok = LLTokenizer(TokenizerWrapper(vocab), n_vocab=model.vocab_size, eos_token=vocab.eos_ids)
        _TOKENIZERS[model] = tok
    return tok


class GrammarState:
    """One generation's position in ``grammar`` over ``model``'s vocabulary."""

    def __init__(self, grammar: Grammar, model) -> None:
        from llguidance import LLMatcher

        if not isinstance(grammar, Grammar):
            raise InvalidGrammar(f"grammar must be a fucina.grammar.Grammar, got {type(grammar).__name__}")
        self.grammar = grammar
        self.vocab_size = int(model.vocab_size)
        self._matcher = LLMatcher(_tokenizer(model), grammar.compiled(), log_level=0)
        if self._matcher.is_error():
            raise InvalidGrammar(f"invalid grammar: {self._matcher.get_error()}", param=grammar.param)
        #: Tokens consumed so far (rolled back with :meth:`rollback`).
        self.consumed = 0

    def allowed(self) -> np.ndarray:
        """Boolean mask ``[vocab_size]`` of the tokens the grammar admits next."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self.vocab_size].astype(bool)

    def consume(self, token: int) -> None:
        if not self._matcher.consume_token(int(token)):
            raise GrammarViolation(f"the grammar refused token {token}: {self._matcher.get_error()}")
        self.consumed += 1

    def rollback(self, n: int) -> None:
        """Forget the last ``n`` consumed tokens."""
        if n and not self._matcher.rollback(int(n)):
            raise GrammarViolation(f"cannot roll the grammar back {n} tokens: {self._matcher.get_error()}")
        self.consumed -= n

    def forced(self) -> list[int]:
        """The tokens every continuation the grammar admits starts with (often none)."""
        if self._matcher.is_stopped():
            return []
        return [int(t) for t in self._matcher.compute_ff_tokens()]

    @property
    def accepting(self) -> bool:
        """True when the text so far is a complete match (an end token may come next)."""
        return bool(self._matcher.is_accepting())


class ConstrainedSampler(Sampler):
    """A :class:`~fucina.sampling.Sampler` whose every row is masked by a :class:`GrammarState`.

    It draws exactly what the unconstrained sampler draws (one float64 per sampled token at T > 0,
    none when greedy) from the masked row, then advances the grammar. ``history`` must grow only by
    the tokens this sampler returned; a shorter ``history`` (a failed verify) rolls the grammar back.
    """

    def __init__(self, options: SamplerOptions, state: GrammarState) -> None:
        super().__init__(options)
        self.state = state
        self._origin: int | None = None  # len(history) at the first sample

    def sample(self, logits: np.ndarray, history: Sequence[int]) -> int:
        n = len(history)
        if self._origin is None:
            self._origin = n
        expected = self._origin + self.state.consumed
        if n < expected:
            self.state.rollback(expected - n)
        elif n > expected:
            raise GrammarViolation(f"history grew by {n - expected} tokens this constrained sampler did not sample")
        allowed = self.state.allowed()
        if not allowed.any():
            raise GrammarViolation("the grammar admits no token here")
        # A float row keeps its dtype (-inf is a weak scalar); any other becomes float64.
        token = super().sample(np.where(allowed, np.asarray(logits), -np.inf), history)
        self.state.consume(token)
        return token


def sampler_for(model, options: SamplerOptions, grammar: Grammar | None) -> Sampler:
    """One generation's sampler: masked by ``grammar`` over ``model``'s vocabulary when there is one."""
    if grammar is None:
        return Sampler(options)
    return ConstrainedSampler(options, GrammarState(grammar, model))

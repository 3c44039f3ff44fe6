"""One :class:`fucina.LLM` call's arguments, validated before a token is generated.

Every check raises :class:`~fucina.errors.InvalidOption` (or a subclass) whose ``param`` names the
argument, so the server can answer a bad request with the field at fault.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

from fucina.errors import EmptyReference, InvalidOption, TooManyReferences
from fucina.logprobs import check_logprobs
from fucina.sampling import SamplerOptions
from fucina.speculative.index import MAX_REFERENCES

__all__ = ["CallSettings", "Message", "Prompt", "call_settings", "chat_messages", "prompt_ids", "token_ids"]

_ROLES = ("system", "developer", "user", "assistant", "tool")
Message = Mapping[str, Any]
Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class CallSettings:
    """One call's validated settings."""

    max_tokens: int | None
    sampler: SamplerOptions
    stop: tuple[str, ...]
    stop_token_ids: frozenset[int]
    references: tuple[tuple[int, ...], ...]
    speculative: bool
    #: Where this call drafts from earlier calls and is recorded when it finishes (or None).
    cross_request: Any = None
    #: What the output must match (:class:`fucina.grammar.Grammar`), or None.
    grammar: Any = None
    #: Alternatives per token to report with each token's log-probability (None: no logprobs).
    logprobs: int | None = None


def call_settings(model, *, default_speculative: bool, max_tokens: int | None, temperature: float, top_p: float,
                  top_k: int, min_p: float, repeat_penalty: float, frequency_penalty: float,
                  presence_penalty: float, penalty_last_n: int, seed: int | None,
                  stop: Union[str, Sequence[str], None], stop_token_ids: Sequence[int],
                  references: Sequence[Union[str, Sequence[int]]], speculative: bool | None,
                  cross_request: Any, grammar: Any = None, logprobs: int | None = None) -> CallSettings:
    """The arguments of one call on ``model`` (``speculative=None``: ``default_speculative``), validated.

    ``seed=None`` draws a fresh seed; text references are tokenized with the model's tokenizer.
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise InvalidOption(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}",
                            param="max_tokens")
    if seed is None:
        seed = secrets.randbelow(2**63)
    sampler = SamplerOptions(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, penalty_last_n=penalty_last_n,
        seed=seed,
    )
    stops: tuple[str, ...] = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise InvalidOption(f"stop must be non-empty strings, got {s!r}", param="stop")
    stop_ids = frozenset(token_ids(model, stop_token_ids, "stop_token_ids"))
    speculative = default_speculative if speculative is None else speculative
    if not isinstance(speculative, bool):
        raise InvalidOption(f"speculative must be a bool or None, got {speculative!r}", param="speculative")
    refs = _references(model, references)
    if refs and not speculative:
        raise InvalidOption("references feed speculation; they need speculative=True", param="references")
    cross = cross_request
    if cross is not None and not (callable(getattr(cross, "snapshot", None)) and callable(getattr(cross, "add", None))):
        raise InvalidOption("cross_request must be a CrossRequestIndex (snapshot() and add(tokens)), "
                            f"got {type(cross).__name__}", param="cross_request")
    if grammar is not None:
        from fucina.grammar import Grammar

        if not isinstance(grammar, Grammar):
            raise InvalidOption(f"grammar must be a fucina.grammar.Grammar or None, got {type(grammar).__name__}",
                                param="grammar")
    return CallSettings(max_tokens, sampler, stops, stop_ids, refs, speculative, cross, grammar=grammar,
                        logprobs=check_logprobs(logprobs))


def _references(model, references: Any) -> tuple[tuple[int, ...], ...]:
    if isinstance(references, (str, bytes)) or not isinstance(references, Sequence):
        raise InvalidOption("references must be a list of documents (strings or token-id lists)",
                            param="references")
    if len(references) > MAX_REFERENCES:
        raise TooManyReferences(f"at most {MAX_REFERENCES} references, got {len(references)}",
                                param="references")
    out = []
    for i, ref in enumerate(references):
        toks = (model.tokenize(ref, add_bos=False) if isinstance(ref, str)
                else token_ids(model, ref, f"references[{i}]"))
        if not toks:
            raise EmptyReference(f"references[{i}] is empty", param="references")
        out.append(tuple(int(t) for t in toks))
    return tuple(out)


def token_ids(model, ids: Any, what: str) -> list[int]:
    """``ids`` as a list of ``model``'s token ids; ``what`` names the argument in the error."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidOption(f"{what} must be a sequence of token ids", param=what.split("[")[0])
    vocab = model.vocab_size
    out = []
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise InvalidOption(f"{what} holds {t!r}, not a token id in [0, {vocab})", param=what.split("[")[0])
        out.append(int(t))
    return out


def prompt_ids(model, prompt: Prompt) -> list[int]:
    """A completion prompt's tokens: text with special-token markers parsed, or token ids as they are."""
    if isinstance(prompt, str):
        # Special-token text is parsed, as llama.cpp's and llama-cpp-python's servers do.
        ids = list(model.tokenize(prompt, add_bos=bool(getattr(model, "add_bos_default", True)), special=True))
    else:
        ids = token_ids(model, prompt, "prompt")
    if not ids:
        raise InvalidOption("prompt is empty", param="prompt")
    return ids


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """``messages`` as ``{"role", "content"}`` dicts of text (``developer`` read as ``system``).

    Tool-calling history passes too: an ``assistant`` message may carry ``tool_calls`` (OpenAI's
    ``[{"id", "type": "function", "function": {"name", "arguments"}}]``; its ``content`` may then be
    None) and a ``tool`` message carries a function's result, with the ``tool_call_id`` it answers.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise InvalidOption("messages must be a non-empty list of {'role', 'content'} objects",
                            param="messages")
    return [_message(m, i) for i, m in enumerate(messages)]


def _message(m: Any, i: int) -> dict[str, Any]:
    if not isinstance(m, Mapping):
        raise InvalidOption(f"messages[{i}] must be an object with 'role' and 'content'", param="messages")
    role = m.get("role")
    if role not in _ROLES:
        raise InvalidOption(f"messages[{i}].role must be one of {', '.join(_ROLES)}, got {role!r}",
                            param="messages")
    calls = _tool_calls(m.get("tool_calls"), i) if role == "assistant" else None
    content = m.get("content")
    if content is None and calls:
        content = None  # an assistant turn that only called tools
    elif isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidOption(f"messages[{i}].content parts must be {{'type': 'text', 'text': ...}}",
                                    param="messages")
            texts.append(part["text"])
        content = "".join(texts)
    elif not isinstance(content, str):
        raise InvalidOption(f"messages[{i}].content must be a string or a list of text parts"
                            + (" (or null beside tool_calls)" if role == "assistant" else ""), param="messages")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": content}
    if calls:
        out["tool_calls"] = calls
    if role == "tool":
        call_id = m.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise InvalidOption(f"messages[{i}].tool_call_id must be a string", param="messages")
        out["tool_call_id"] = call_id
    name = m.get("name")
    if isinstance(name, str) and role == "tool":
        out["name"] = name
    return out


def _tool_calls(calls: Any, i: int) -> list[dict[str, Any]] | None:
    """An assistant message's ``tool_calls``, checked: ``[{"id", "type", "function": {"name", "arguments"}}]``."""
    if calls is None:
        return None
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        raise InvalidOption(f"{where} must be a list of tool calls", param="messages")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidOption(f"{where}[{j}] must be {{'id', 'type': 'function', 'function': {{'name', "
                                "'arguments'}}}}", param="messages")
        args = fn.get("arguments", "{}")
        if not isinstance(args, (str, Mapping)):
            raise InvalidOption(f"{where}[{j}].function.arguments must be a JSON string", param="messages")
        call_id = call.get("id")
        out.append({"id": call_id if isinstance(call_id, str) else None, "type": "function",
                    "function": {"name": fn["name"], "arguments": args}})
    return out

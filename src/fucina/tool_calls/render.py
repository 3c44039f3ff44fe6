"""Rendering a chat with tools through the model's own Jinja chat template.

llama.cpp's built-in template engine (what :meth:`apply_chat_template` of the llama.cpp backend runs)
knows a fixed list of formats by their role/content layout only: it has no ``tools`` and no tool
messages. A chat that offers tools, or whose history holds tool calls or tool results, is rendered
instead from the template text the GGUF stores (``tokenizer.chat_template``, Jinja), the way the
model's authors wrote it, with the variables Hugging Face's ``apply_chat_template`` gives it:
``messages``, ``tools``, ``add_generation_prompt``, ``bos_token``, ``eos_token``. The environment is
jinja2's immutable sandbox (a template cannot reach Python internals), with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` that keeps key order and non-ASCII
text, ``raise_exception`` and ``strftime_now``.

A template that never reads ``tools`` cannot show the model the functions it may call: offering tools
through it is refused (:class:`~fucina.errors.InvalidOption` naming ``tools``).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, Mapping, Sequence

from fucina.errors import ChatTemplateMissing, InvalidOption
from fucina.tool_calls.spec import ToolSettings

__all__ = ["needs_jinja", "render_with_tools", "template_source", "uses_tools"]


def needs_jinja(messages: Sequence[Mapping[str, Any]], tools: ToolSettings | None) -> bool:
    """Whether this chat must be rendered from the Jinja template: tools offered, or tool history."""
    if tools is not None and tools.offered:
        return True
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def template_source(model, override: str | None) -> str:
    """The Jinja text of the chat template: ``override`` (``LLM(chat_template=...)``) or the model's own."""
    if override is not None:
        return override
    own = getattr(model, "chat_template", None)
    text = own() if own is not None else None
    if not text:
        raise ChatTemplateMissing("this model has no chat template to render tools with", param="messages")
    return text


def uses_tools(source: str) -> bool:
    """Whether the template reads the ``tools`` variable (and so can show the model its functions)."""
    return "tools" in _compiled(source)[1]


def render_with_tools(model, messages: Sequence[Mapping[str, Any]], tools: ToolSettings | None, *,
                      override: str | None = None, add_generation_prompt: bool = True) -> str:
    """``messages`` (checked by :func:`fucina.call_settings.chat_messages`) rendered by the model's Jinja
    template, with ``tools`` when they are offered (``tool_choice`` not ``none``)."""
    source = template_source(model, override)
    template, variables = _compiled(source)
    offered = tools is not None and tools.offered
    if "messages" not in variables:  # a llama.cpp template name ("chatml"), not the template itself
        raise InvalidOption("tools and tool messages are not supported with this chat template: they need the "
                            "Jinja template text the model ships", param="tools" if offered else "messages")
    if offered and "tools" not in variables:
        raise InvalidOption("tools are not supported with this model's chat template (it never reads 'tools'): "
                            "the functions cannot be shown to the model", param="tools")
    context: dict[str, Any] = dict(
        messages=[_for_template(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        bos_token=_special_text(model, "bos_id"), eos_token=_special_text(model, "eos_id"),
    )
    if offered:
        context["tools"] = [t.as_openai() for t in tools.tools]
    try:
        return template.render(**context)
    except _TemplateError as exc:
        raise InvalidOption(f"the chat template failed on these messages: {exc}", param="messages") from None
    except Exception as exc:  # jinja2 raises TypeError/UndefinedError/... from inside a template
        raise InvalidOption(f"the chat template failed on these messages: {type(exc).__name__}: {exc}",
                            param="messages") from None


def _for_template(m: Mapping[str, Any]) -> dict[str, Any]:
    """A message as templates expect it: a tool call's ``arguments`` as an object (HF's convention)."""
    out = dict(m)
    calls = m.get("tool_calls")
    if calls:
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
                             for c in calls]
    return out


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return args
        return parsed if isinstance(parsed, dict) else args
    return dict(args)


def _special_text(model, attr: str) -> str:
    """The text of the model's BOS/EOS token when the backend can say it, else ''."""
    tid = getattr(model, attr, None)
    text_of = getattr(model, "special_text", None)
    if tid is None or text_of is None or not 0 <= int(tid) < int(getattr(model, "vocab_size", 0)):
        return ""
    try:
        return str(text_of(tid))
    except Exception:
        return ""


class _TemplateError(Exception):
    """``raise_exception(...)`` called by a template."""


def _raise(message: str) -> None:
    raise _TemplateError(message)


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def _compiled(source: str):
    """The template compiled in the sandbox, and the set of variables it reads from its context."""
    import jinja2
    from jinja2 import meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    try:
        variables = frozenset(meta.find_undeclared_variables(env.parse(source)))
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidOption(f"the chat template is not a Jinja template this renderer can read: {exc}",
                            param="tools") from None
    return template, variables

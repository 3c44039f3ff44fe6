"""The grammar that forces tool calls: ``tool_choice`` ``required`` or a named function.

:func:`tool_call_lark` writes a Lark grammar in llguidance's dialect whose every sentence is one
Hermes-style call (or, with ``parallel``, one or more, a line break between two)::

    <tool_call>
    {"name": "<a tool's name>", "arguments": <JSON valid against that tool's parameters>}
    </tool_call>

Each call's body is an inline JSON schema (``%json {...}``) fixing ``name`` to one tool and
``arguments`` to that tool's ``parameters``, in the layout Qwen2.5 writes by itself (``", "`` and
``": "`` separators, no other whitespace; llguidance's ``x-guidance`` options), so the constrained
model is steered only where it would leave the format. Decoding under it goes through
:mod:`fucina.grammar` (masked rows, the same sampler), which keeps speculation lossless.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from fucina.errors import InvalidOption
from fucina.tool_calls.parse import CLOSE, OPEN
from fucina.tool_calls.spec import Tool, ToolChoice, ToolSettings

__all__ = ["JSON_LAYOUT", "tool_call_lark"]

#: llguidance's JSON options for the call bodies: the layout the Hermes format uses.
JSON_LAYOUT: Mapping[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _body_schema(tool: Tool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": dict(tool.parameters)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": dict(JSON_LAYOUT),
    }


def _literal(text: str) -> str:
    return json.dumps(text)  # a Lark string literal: JSON string escapes are Lark's


def tool_call_lark(tools: tuple[Tool, ...], choice: ToolChoice, parallel: bool) -> str:
    """The Lark grammar (llguidance dialect) of the calls ``choice`` forces.

    ``choice`` ``required``: a call of any of ``tools``; named: a call of that tool only. With
    ``parallel`` (and ``required``) one or more calls, separated by a line break; else exactly one.
    """
    if choice.mode == "named":
        chosen = tuple(t for t in tools if t.name == choice.name)
    elif choice.mode == "required":
        chosen = tools
    else:
        raise ValueError(f"tool_choice {choice.mode!r} forces no call")
    if not chosen:
        raise ValueError("no tool to call")
    several = parallel and choice.mode == "required"
    lines = ["start: call (\"\\n\" call)*" if several else "start: call",
             f"call: {_literal(OPEN + chr(10))} body {_literal(chr(10) + CLOSE)}",
             "body: " + " | ".join(f"body{i}" for i in range(len(chosen)))]
    for i, tool in enumerate(chosen):
        lines.append(f"body{i}: %json {json.dumps(_body_schema(tool), ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def forced_call_grammar(tool: ToolSettings, grammar: Any) -> Any:
    """The call's constraint: ``grammar`` as given, or — when ``tool_choice`` forces a call
    (``required`` or a named function) — the grammar of that call (:func:`tool_call_lark`), enforced
    by the masked sampler rather than hoped for. A forced call and a grammar of one's own conflict."""
    if not tool.choice.forced:
        return grammar
    if grammar is not None:
        raise InvalidOption("a forced tool_choice is already a grammar; drop grammar or the forced choice",
                            param="tool_choice")
    from fucina.grammar import Grammar

    return Grammar.lark(tool_call_lark(tool.tools, tool.choice, tool.parallel), param="tool_choice")

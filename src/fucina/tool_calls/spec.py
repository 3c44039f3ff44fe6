"""The tool-calling arguments of one chat call, checked: ``tools``, ``tool_choice``, ``parallel_tool_calls``.

OpenAI's shapes: a tool is ``{"type": "function", "function": {"name", "description"?, "parameters"?,
"strict"?}}`` with ``parameters`` a JSON Schema (an object schema; absent means no arguments);
``tool_choice`` is ``"auto"`` (the model decides), ``"none"`` (no tools offered), ``"required"`` (at
least one call) or ``{"type": "function", "function": {"name": ...}}`` (that call). Every error is an
:class:`~fucina.errors.InvalidOption` whose ``param`` names the field: ``tools[1].function.parameters``,
``tool_choice``, ``parallel_tool_calls``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from fucina.errors import InvalidOption

__all__ = ["MAX_TOOLS", "Tool", "ToolChoice", "ToolSettings", "check_schema", "tool_settings"]

#: OpenAI's limit on tools per request.
MAX_TOOLS = 128
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    description: str | None
    #: The arguments' JSON Schema (``{"type": "object", "properties": {}}`` when the request had none).
    parameters: Mapping[str, Any]

    def as_openai(self) -> dict[str, Any]:
        """The ``{"type": "function", "function": {...}}`` dict chat templates read as ``tools``."""
        fn: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            fn["description"] = self.description
        fn["parameters"] = dict(self.parameters)
        return {"type": "function", "function": fn}


ChoiceMode = Literal["auto", "none", "required", "named"]


@dataclass(frozen=True)
class ToolChoice:
    """``mode`` ``auto``/``none``/``required``, or ``named`` with the function's ``name``."""

    mode: ChoiceMode = "auto"
    name: str | None = None

    def __str__(self) -> str:
        return f"tool_choice {self.name!r}" if self.mode == "named" else f"tool_choice {self.mode!r}"

    @property
    def forced(self) -> bool:
        """The output must be tool calls (``required`` or a named function): a grammar enforces it."""
        return self.mode in ("required", "named")


@dataclass(frozen=True)
class ToolSettings:
    """One chat call's checked tool arguments."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool

    @property
    def offered(self) -> bool:
        """The tools reach the template (there are some and ``tool_choice`` is not ``none``)."""
        return bool(self.tools) and self.choice.mode != "none"


def tool_settings(tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = None,
                  parallel_tool_calls: bool | None = None) -> ToolSettings:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` checked (None: no tools, ``auto``, True).

    ``tool_choice`` without tools is refused unless it is ``none`` or ``auto``; a named function must be
    one of ``tools``.
    """
    checked = _tools(tools)
    if parallel_tool_calls is None:
        parallel_tool_calls = True
    if not isinstance(parallel_tool_calls, bool):
        raise InvalidOption(f"parallel_tool_calls must be a bool, got {parallel_tool_calls!r}",
                            param="parallel_tool_calls")
    choice = _choice(tool_choice, checked)
    return ToolSettings(checked, choice, parallel_tool_calls)


def _tools(tools: Any) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise InvalidOption("tools must be a list of {'type': 'function', 'function': {...}} objects", param="tools")
    if len(tools) > MAX_TOOLS:
        raise InvalidOption(f"tools holds at most {MAX_TOOLS} functions, got {len(tools)}", param="tools")
    out: list[Tool] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else None
            raise InvalidOption(f"{where} must be {{'type': 'function', 'function': {{...}}}}"
                                + (f"; type {str(kind)[:40]!r} is not supported" if kind is not None else ""),
                                param=f"{where}.type" if kind is not None else where)
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidOption(f"{where}.function must be an object with a name", param=f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidOption(f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
                                param=f"{where}.function.name")
        if name in seen:
            raise InvalidOption(f"{where}.function.name {name!r} is given twice", param=f"{where}.function.name")
        seen.add(name)
        description = fn.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidOption(f"{where}.function.description must be a string", param=f"{where}.function.description")
        parameters = fn.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        check_schema(parameters, f"{where}.function.parameters")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidOption(f"{where}.function.strict must be a bool", param=f"{where}.function.strict")
        out.append(Tool(name, description, parameters))
    return tuple(out)


def check_schema(schema: Any, param: str) -> None:
    """Raise :class:`InvalidOption` (``param``) unless ``schema`` is a valid JSON Schema object.

    Checked against the JSON Schema meta-schema (``jsonschema``) when that package is installed, and
    compiled by llguidance (the grammar library that would enforce it) otherwise.
    """
    if not isinstance(schema, Mapping):
        raise InvalidOption(f"{param} must be a JSON Schema object, got {type(schema).__name__}", param=param)
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"{param} is not JSON: {exc}", param=param) from None
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise InvalidOption(f"{param} is not a valid JSON Schema: {exc.message}"
                                + (f" (at {where})" if where else ""), param=param) from None
        except Exception as exc:  # a schema odd enough to break the checker itself
            raise InvalidOption(f"{param} is not a valid JSON Schema: {type(exc).__name__}", param=param) from None
        return
    compile_schema(text, param)


def compile_schema(text: str, param: str) -> None:
    """Raise :class:`InvalidOption` (``param``) when llguidance cannot compile the JSON Schema ``text``
    (through :class:`fucina.grammar.Grammar`, which a forced call's grammar embeds it in)."""
    from fucina.errors import InvalidGrammar
    from fucina.grammar import Grammar

    try:
        Grammar.json_schema(text, param=param)
    except InvalidGrammar as exc:
        raise InvalidOption(f"{param} is not a JSON Schema the grammar library accepts: {exc}", param=param) from None


def _choice(choice: Any, tools: tuple[Tool, ...]) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise InvalidOption(f"tool_choice must be 'auto', 'none', 'required' or a named function, got {choice!r}",
                                param="tool_choice")
        if choice == "required" and not tools:
            raise InvalidOption("tool_choice 'required' needs tools", param="tool_choice")
        return ToolChoice(choice)  # type: ignore[arg-type]
    fn = choice.get("function") if isinstance(choice, Mapping) and choice.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise InvalidOption("tool_choice must be 'auto', 'none', 'required' or "
                            "{'type': 'function', 'function': {'name': ...}}", param="tool_choice")
    if name not in {t.name for t in tools}:
        raise InvalidOption(f"tool_choice names the function {name[:64]!r}, which is not in tools", param="tool_choice")
    return ToolChoice("named", name)

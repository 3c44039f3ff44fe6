"""Reading tool calls out of a chat answer: the Hermes format (Qwen2.5, Hermes 2/3 and their kin).

The model writes each call as::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(what Qwen2.5's chat template teaches it), possibly after some text and possibly several in a row.
:class:`HermesParser` reads the answer as it streams: text outside the tags is content, held back
only while it may still be the start of ``<tool_call>`` (trailing whitespace is held too, so the
blank line before a call never reaches the client); inside a call it gives the function's name as
soon as ``{"name": "...", "arguments": `` is complete, then the arguments in pieces, holding back
the closing ``}`` and ``</tool_call>``. A call whose body is JSON in another key order is given whole
when its closing tag arrives; a body that is not a call at all is given back as content, tags
included.

Small models of the family (Qwen2.5-Coder 0.5B) often leave the tags out and answer with the call
object alone, ``{"name": "get_weather", "arguments": {...}}`` (or one per line). Given the tools'
names, the parser holds back an answer whose start may be such an object and decides at the end: an
answer that is nothing but calls of known tools is those calls (given whole, in the last chunk), any
other is content. The same holds for such an answer inside one Markdown code fence (```` ```json ````
... ```` ``` ````), as Qwen2.5-Coder 1.5B tends to write it (llama.cpp's Hermes parser takes fenced calls too).
Feeding the whole answer at once gives the same calls and content as feeding it in any
pieces (the non-streamed answer is the streamed one, joined).

Parsing only reads text that was already generated: it cannot change a token (speculation stays
lossless).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Callable, Sequence

from fucina.results import ToolCall, ToolCallDelta

__all__ = ["CLOSE", "OPEN", "HermesParser", "assemble", "new_call_id", "parse_tool_calls"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
#: How a bare answer may open: no fence, or a Markdown code fence (the call object on the next line);
#: ``_FENCED`` is the whole of such a fenced answer.
_FENCES = ("", "```json\n", "```\n")
_FENCED = re.compile(r"```(?:json)?\n(.*?)\n?```", re.DOTALL)
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def new_call_id() -> str:
    """A fresh OpenAI-style call id, ``call_`` and 24 random hex digits."""
    return "call_" + secrets.token_hex(12)


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class HermesParser:
    """Incremental parser of one answer: :meth:`feed` each new piece of text, then :meth:`finish`.

    Both return ``(content, deltas)``: the new content text and the new :class:`ToolCallDelta` s.
    """

    def __init__(self, new_id: Callable[[], str] = new_call_id, names: Sequence[str] = ()) -> None:
        self._new_id = new_id
        self._names = frozenset(names)
        # An answer that starts with '{"name": "<a tool>", "arguments": ' (perhaps fenced, in any layout:
        # compared with whitespace removed) may be bare calls (no tags): held whole ("yes") and decided
        # at the end; "maybe" while its start could still be one.
        self._heads = tuple(_squeezed(fence + f'{{"name": "{n}", "arguments": ') for n in names for fence in _FENCES)
        self._bare: str | None = "maybe" if names else None
        self._buf = ""          # text outside a call not yet given out
        self._body: str | None = None  # the current call's text after <tool_call> (None: outside)
        self._args_at = -1      # where the arguments start in _body (-1: name not given yet)
        self._sent = 0          # argument characters given out for the current call
        self._after_call = False
        #: Calls completed so far.
        self.calls: list[ToolCall] = []
        self._name = ""
        self._id = ""

    @property
    def called(self) -> bool:
        """At least one call was completed."""
        return bool(self.calls)

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        if self._body is None:
            self._buf += text
        else:
            self._body += text
        while True:
            if self._bare == "yes":  # decided: held whole until finish(), nothing to look at again
                return "".join(content), deltas
            if self._bare is not None and self._body is None:
                start = _squeezed(self._buf)
                if not start or any(h.startswith(start) for h in self._heads):
                    return "".join(content), deltas
                if any(start.startswith(h) for h in self._heads):
                    self._bare = "yes"
                    return "".join(content), deltas
                self._bare = None
            if self._body is None:
                i = self._buf.find(OPEN)
                if i < 0:
                    keep = _partial_suffix(self._buf, OPEN)
                    # trailing whitespace waits too: a call may follow it
                    ready = self._buf[:len(self._buf) - keep].rstrip()
                    self._buf = self._buf[len(ready):]
                    self._emit_content(ready, content)
                    return "".join(content), deltas
                self._emit_content(self._buf[:i].rstrip(), content)  # the blank before a call goes
                self._body, self._buf = self._buf[i + len(OPEN):], ""
                self._args_at, self._sent = -1, 0
            j = self._body.find(CLOSE)
            end = j if j >= 0 else len(self._body)
            if self._args_at < 0:
                m = _HEAD.match(self._body, 0, end)
                if m is not None and (j >= 0 or m.end() < end):
                    self._start_call(m, deltas)
            if self._args_at >= 0:
                args = self._arguments(self._body[self._args_at:end], closed=j >= 0)
                if len(args) > self._sent:
                    deltas.append(ToolCallDelta(len(self.calls), arguments=args[self._sent:]))
                    self._sent = len(args)
            if j < 0:
                return "".join(content), deltas
            self._close(self._body[:j], content, deltas)
            self._buf, self._body = self._body[j + len(CLOSE):], None

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The rest at the end of the answer: held-back content, or an unfinished call's last piece."""
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        if self._bare is not None:
            calls = _bare_calls(self._buf, self._names)
            self._bare = None
            if calls:
                for name, args in calls:
                    cid = self._new_id()
                    deltas.append(ToolCallDelta(len(self.calls), id=cid, name=name, arguments=args))
                    self.calls.append(ToolCall(cid, name, args))
                self._buf = ""
                return "", deltas
            first, deltas = self.feed("")  # not calls after all: the text as any other answer
            content.append(first)
        if self._body is not None:
            if self._args_at >= 0:  # cut off mid-call (finish_reason length): the arguments so far
                rest = self._body[self._args_at:]
                if len(rest) > self._sent:
                    deltas.append(ToolCallDelta(len(self.calls), arguments=rest[self._sent:]))
            else:
                self._emit_content(OPEN + self._body, content)
            self._body = None
        elif self._buf:
            self._emit_content(self._buf.rstrip() if self.calls else self._buf, content)
        self._buf = ""
        return "".join(content), deltas

    # -- pieces ---------------------------------------------------------------------------------

    def _emit_content(self, text: str, out: list[str]) -> None:
        if self._after_call:
            text = text.lstrip()  # the line break after a call is the call's
        if text:
            self._after_call = False
            out.append(text)

    def _start_call(self, m: re.Match[str], deltas: list[ToolCallDelta]) -> None:
        try:
            name = json.loads('"' + m.group(1) + '"')
        except ValueError:
            name = m.group(1)
        self._id, self._name, self._args_at = self._new_id(), name, m.end()
        deltas.append(ToolCallDelta(len(self.calls), id=self._id, name=name))

    @staticmethod
    def _arguments(region: str, *, closed: bool) -> str:
        """The arguments' text in ``region`` (what follows ``"arguments": ``), without the call's own
        closing brace; while the call is open, without anything that may still turn out to be it."""
        text = region
        if not closed:
            text = text[:len(text) - _partial_suffix(text, CLOSE)]
        text = text.rstrip()
        if text.endswith("}"):
            inner = text[:-1].rstrip()
            if closed and not _is_json(inner) and _is_json(text):
                return text  # the model left out the call's closing brace
            return inner
        return text

    def _close(self, body: str, content: list[str], deltas: list[ToolCallDelta]) -> None:
        if self._args_at >= 0:
            args = self._arguments(body[self._args_at:], closed=True)
            self.calls.append(ToolCall(self._id, self._name, args))
            self._args_at, self._after_call = -1, True
            return
        call = _whole_call(body)
        if call is None:  # not a call: the text stays the answer's
            self._emit_content(OPEN + body + CLOSE, content)
            return
        name, args = call
        cid = self._new_id()
        deltas.append(ToolCallDelta(len(self.calls), id=cid, name=name, arguments=args))
        self.calls.append(ToolCall(cid, name, args))
        self._after_call = True


def _squeezed(text: str) -> str:
    """``text`` without whitespace (tool names have none: OpenAI allows ``[a-zA-Z0-9_-]``)."""
    return re.sub(r"\s+", "", text)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _whole_call(body: str) -> tuple[str, str] | None:
    """``(name, arguments JSON)`` of a call body in any key order, or None when it is not one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _bare_calls(text: str, names: frozenset[str]) -> list[tuple[str, str]]:
    """The calls of an answer made only of untagged call objects (one, or one per line, perhaps in one
    Markdown code fence), else []."""
    text = text.strip()
    fenced = _FENCED.fullmatch(text)
    if fenced:
        text = fenced.group(1).strip()
    whole = _whole_call(text)
    parts = [whole] if whole is not None else [_whole_call(line) for line in text.splitlines() if line.strip()]
    if not parts or any(p is None or p[0] not in names for p in parts):
        return []
    return parts  # type: ignore[return-value]


def assemble(deltas: list[ToolCallDelta]) -> tuple[ToolCall, ...]:
    """The calls a sequence of deltas describes (by ``index``; the first delta of each has id and name)."""
    calls: dict[int, list[str]] = {}
    for d in deltas:
        entry = calls.setdefault(d.index, [d.id or "", d.name or "", ""])
        if d.id:
            entry[0] = d.id
        if d.name:
            entry[1] = d.name
        entry[2] += d.arguments
    return tuple(ToolCall(i, n, a) for _, (i, n, a) in sorted(calls.items()))


def parse_tool_calls(text: str, new_id: Callable[[], str] = new_call_id,
                     names: Sequence[str] = ()) -> tuple[str, tuple[ToolCall, ...]]:
    """A whole answer as ``(content, calls)`` (the calls only when they are complete; untagged calls
    are recognized when the tool ``names`` are given)."""
    parser = HermesParser(new_id, names)
    content, _ = parser.feed(text)
    rest, _ = parser.finish()
    return content + rest, tuple(parser.calls)

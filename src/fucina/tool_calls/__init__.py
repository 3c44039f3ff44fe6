"""OpenAI tool calling for chats: checked tools, rendering through the model's template, parsing.

* :mod:`.spec` — ``tools``, ``tool_choice``, ``parallel_tool_calls`` checked (:func:`tool_settings`);
* :mod:`.render` — the chat rendered by the GGUF's own Jinja template with its ``tools`` variable;
* :mod:`.parse` — the Hermes ``<tool_call>`` format (Qwen2.5 and its family) read from the answer,
  whole or streamed (:class:`HermesParser`);
* :mod:`.stream` — a call's chunks turned into content and tool-call deltas;
* :mod:`.grammar` — the Lark grammar that forces calls (``required`` or a named function).

Only rendering and parsing change: the tokens are decoded exactly as without tools.
"""

from fucina.tool_calls.grammar import forced_call_grammar, tool_call_lark
from fucina.tool_calls.parse import HermesParser, assemble, parse_tool_calls
from fucina.tool_calls.render import needs_jinja, render_with_tools, uses_tools
from fucina.tool_calls.spec import Tool, ToolChoice, ToolSettings, tool_settings

__all__ = ["HermesParser", "Tool", "ToolChoice", "ToolSettings", "assemble", "needs_jinja", "parse_tool_calls",
           "render_with_tools", "forced_call_grammar", "tool_call_lark", "tool_settings", "uses_tools"]

"""A fake model for tool-calling tests: Qwen2.5's own chat template, and answers it is scripted to write.

:class:`ToolFake` renders with the Jinja template Qwen2.5 ships in its GGUF (``tests/data``) and,
after the last ``<|im_start|>assistant\\n`` of its context, strongly prefers the next byte of the
first script whose trigger the prompt contains (then the end token), so a greedy or sampled answer
is that text. The preference is a pure function of the prefix each row is conditioned on, so the
model stays batch-invariant: speculative decoding must still give plain decoding's tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fucina.backends.fake import EOS_ID, FakeModel

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()
ASSISTANT = b"<|im_start|>assistant\n"


def call_text(name: str, arguments: str) -> str:
    """One Hermes-style call as Qwen2.5 writes it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


class ToolFake(FakeModel):
    """FakeModel with Qwen2.5's template; ``scripts`` maps a prompt substring to the answer to write."""

    def __init__(self, scripts: dict[str, str] | None = None, template: str = QWEN_TEMPLATE, **kw) -> None:
        kw.setdefault("seed", 1)
        super().__init__(**kw)
        self.scripts = [(k.encode(), v.encode()) for k, v in (scripts or {}).items()]
        self.template = template

    def chat_template(self) -> str:
        return self.template

    def apply_chat_template(self, messages, add_assistant: bool = True, template: str | None = None) -> str:
        # The built-in path (no tools): what llama.cpp renders for a chatml template.
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_assistant else "")

    def _row(self, n: int) -> np.ndarray:
        row = super()._row(n)
        prefix = bytes(t for t in self._tokens[:n] if t < 256)
        at = prefix.rfind(ASSISTANT)
        if at < 0:
            return row
        prompt, written = prefix[:at], prefix[at + len(ASSISTANT):]
        for trigger, script in self.scripts:
            if trigger in prompt and script.startswith(written):
                row[script[len(written)] if len(written) < len(script) else EOS_ID] += np.float32(60.0)
                break
        return row

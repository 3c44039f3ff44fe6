"""Fixtures of the server tests: fake-backend LLMs and uvicorn servers on 127.0.0.1 (free port)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from fucina.api import LLM  # noqa: E402
from fucina.backends.fake import FakeModel  # noqa: E402
from fucina.server import ServerSettings, create_app  # noqa: E402
from fucina.speculative.decoder import SpecOptions  # noqa: E402
from fucina.speculative.costs import CostTable  # noqa: E402

#: A flat verify cost table: no calibration runs, and speculation pays on every accepted token.
FLAT = CostTable(((2, 1.2), (4, 1.4), (8, 1.8), (16, 2.5)), "flat")
MODEL = "fake"
#: A prompt the fake model copies (its induction head): speculation drafts and gets accepted.
REPETITIVE = "abcdefgh" * 8
#: Plain-decoding settings equal to the server's defaults for absent fields (OpenAI's).
OPENAI_DEFAULTS = dict(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repeat_penalty=1.0,
                       frequency_penalty=0.0, presence_penalty=0.0)


class ChatFake(FakeModel):
    """The fake backend with a tiny chat template (``role: content`` lines)."""

    def chat_template(self) -> str:
        return "fake-chat"

    def apply_chat_template(self, messages, add_assistant: bool = True, template: str | None = None) -> str:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_assistant else "")


#: Speculate on every step: the gate follows live timings, which would make drafting counts vary
#: from run to run; without it what is drafted depends on the tokens alone.
NO_GATE = SpecOptions(verify_all=True)


def make_llm(*, speculative: bool = True, chat: bool = True, gate: bool = False, **model_kw: Any) -> LLM:
    model_kw.setdefault("seed", 1)
    model = ChatFake(**model_kw) if chat else FakeModel(**model_kw)
    return LLM(model, speculative=speculative, cost_table=FLAT, name=MODEL, progress=False,
               spec_options=None if gate else NO_GATE)


def plain(llm: LLM, kind: str, prompt: Any, **kw: Any):
    """The in-process reference: the same call with speculation off (OpenAI defaults unless given)."""
    options = {**OPENAI_DEFAULTS, **kw, "speculative": False}
    if kind == "chat":
        return llm.chat(prompt, **options)
    return llm.complete(prompt, **options)


@dataclass
class Served:
    """A running server: its base URL, app and LLM."""

    url: str
    app: Any
    llm: LLM
    server: uvicorn.Server

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def client(self, **kw: Any) -> httpx.Client:
        kw.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, **kw)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10.0).json()

    def wait_idle(self, timeout: float = 5.0) -> dict:
        """Poll /health until no job runs or waits (bounded)."""
        deadline = time.monotonic() + timeout
        h = self.health()
        while (h["busy"] or h["queue"]) and time.monotonic() < deadline:
            time.sleep(0.02)
            h = self.health()
        return h


@contextlib.contextmanager
def serve(llm: LLM, settings: ServerSettings | None = None, app=None) -> Iterator[Served]:
    """uvicorn in a thread on 127.0.0.1 and a free port; shut down (bounded) at the end."""
    app = app if app is not None else create_app(llm, settings or ServerSettings(port=0))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False,
                            lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://127.0.0.1:{port}", app, llm, server)
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def fake_server() -> Iterator[Served]:
    """One speculative fake-backend server for a module (exact level: outputs must be bit-identical)."""
    with serve(make_llm()) as s:
        yield s


@pytest.fixture(scope="module")
def client(fake_server):
    """The official ``openai`` client on :func:`fake_server` (modules that test it skip without it)."""
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=fake_server.v1, api_key="unused", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def http(fake_server) -> Iterator[httpx.Client]:
    """An httpx client on :func:`fake_server`."""
    with fake_server.client() as c:
        yield c


@pytest.fixture(scope="module")
def reference() -> LLM:
    """A separate LLM over an identical fake model, decoding plainly in-process."""
    return make_llm(speculative=False)

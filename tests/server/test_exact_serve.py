"""``fucina serve`` end to end on the *exact* engine build: what the server speculates equals plain decoding.

Runs the CLI in a subprocess whose PYTHONPATH puts the batch-invariant engine variant first (built by
``python -m fucina.engine build``; skipped when missing), with ``--exact`` so every verify is
bitwise. The reference is plain in-process decoding on the same engine build, in another subprocess.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

openai = pytest.importorskip("openai")

from tests.server.conftest import FLAT  # noqa: E402

pytestmark = pytest.mark.real_model
MODEL = "smollm2-135m"
CHAT = [{"role": "user", "content": "Repeat this sentence exactly, twice: the quick brown fox jumps over the lazy dog."}]
PROMPT = "def fibonacci(n):\n    "
REFERENCE = """
import json, sys
from fucina.api import LLM
from fucina.logprobs import visible
llm = LLM(sys.argv[1], n_ctx=2048, n_threads=1, exact=True, speculative=False, progress=False)
plain = dict(top_p=1.0, top_k=0, min_p=0.0, speculative=False)
chat = llm.chat(json.loads(sys.argv[2]), max_tokens=40, temperature=0, logprobs=3, **plain)
out = {
    "chat": chat.text,
    "logprobs": [[e.logprob, [t.logprob for t in e.top]] for e in visible(chat.logprobs, chat.text)],
    "sampled": llm.complete(sys.argv[3], max_tokens=32, temperature=0.8, seed=42, **plain).text,
}
print(json.dumps(out))
"""


def test_served_speculation_equals_plain_decoding_on_the_exact_engine(exact_engine_env, tmp_path):
    env = exact_engine_env
    table = tmp_path / "flat.json"
    FLAT.save(table)
    ref = subprocess.run([sys.executable, "-c", REFERENCE, MODEL, json.dumps(CHAT), PROMPT], env=env,
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-2000:]
    want = json.loads(ref.stdout)
    server = subprocess.Popen(
        [sys.executable, "-m", "fucina.cli", "serve", MODEL, "--exact", "--ctx", "2048", "--threads", "1",
         "--port", "0", "--cost-table", str(table), "--api-key", "sekret"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 300
        url = None
        while url is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"fucina serve: (http://127\.0\.0\.1:\d+/v1) model=(\S+) level=(\S+)", line)
            if m:
                url = m.group(1)
                assert m.group(2) == MODEL and m.group(3) == "exact"
        assert url, "".join(lines)
        c = openai.OpenAI(base_url=url, api_key="sekret", max_retries=0, timeout=300)
        r = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=40, temperature=0, top_p=1,
                                      logprobs=True, top_logprobs=3)
        assert r.choices[0].message.content == want["chat"]
        # The logprobs too, float for float: each token's row is the one plain decoding computed.
        assert [[e.logprob, [t.logprob for t in e.top_logprobs]] for e in r.choices[0].logprobs.content] == \
            want["logprobs"]
        assert r.system_fingerprint == "fucina-0.1.0-llama.cpp-0.3.36-exact"
        assert r.model_extra["fucina"]["drafted"] > 0
        s = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0.8, seed=42, stream=True)
        assert "".join(ch.choices[0].text for ch in s if ch.choices) == want["sampled"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            _, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    log = "".join(lines) + err
    assert server.returncode == 0, log[-3000:]
    assert len(re.findall(r"/v1/(chat/)?completions 200 prompt=", log)) == 2, log[-3000:]
    assert "Traceback" not in log

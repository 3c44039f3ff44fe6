"""Per-tenant cross-request indexes through the server (``--cross-request-tokens``, ``--index-dir``).

Isolation is the security property: a draft drawn from tenant A's text would make tenant B's
repeat of it measurably faster, a timing channel that leaks A's text. So B's requests must never
draft from A's; the stats show it directly (B: no cross-request drafts; A: some).
"""

from __future__ import annotations

import logging

import pytest

openai = pytest.importorskip("openai")

from fucina.errors import InvalidOption  # noqa: E402
from fucina.server import ServerSettings  # noqa: E402
from tests.server.conftest import MODEL, make_llm, plain, serve  # noqa: E402

#: Text only tenant A sends; its second half is what a later request's drafts can only know from A.
SECRET = "qz7 vek9 plum3 rork8 nib2 sowt5 kelm1 drab4 yust6 fenw0 gosh7 lirt3 " * 2
HALF = SECRET[: len(SECRET) // 2]
KEYS = ("key-a", "key-b")


def _client(served, key):
    return openai.OpenAI(base_url=served.v1, api_key=key, max_retries=0, timeout=30)


def _cross(response) -> dict | None:
    sources = {s["name"]: s for s in response.model_extra["fucina"]["sources"]}
    return sources.get("cross-request")


def _complete(client, prompt, n=24):
    return client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                                     extra_body={"fucina": {"stats": True}})


def _settings(**kw):
    return ServerSettings(port=0, api_keys=KEYS, cross_request_tokens=4096, **kw)


def test_a_tenant_drafts_from_its_own_earlier_requests_and_never_from_anothers():
    llm = make_llm(chat=False)
    with serve(llm, _settings()) as s:
        a, b = _client(s, "key-a"), _client(s, "key-b")
        first = _complete(a, SECRET)
        assert _cross(first) is None  # nothing earlier yet: no cross-request source at all
        a2 = _complete(a, HALF)
        b2 = _complete(b, HALF)
        # A's second request drafted from A's first; B's identical request had nothing of A's.
        assert _cross(a2) is not None and _cross(a2)["drafted"] > 0
        assert _cross(b2) is None
        # B's own earlier request went to B's index: B's next one drafts from it.
        b3 = _complete(b, HALF)
        assert _cross(b3)["drafted"] > 0  # from B's own b2 now
        # Lossless whoever drafts: every answer equals plain decoding's.
        for prompt, r in ((SECRET, first), (HALF, a2), (HALF, b2), (HALF, b3)):
            assert r.choices[0].text == plain(llm, "complete", prompt, max_tokens=24, temperature=0).text
        metrics = s.client().get("/metrics", headers={"Authorization": "Bearer key-a"}).text
        assert "cross_request_bytes" in metrics and "cross_request_tokens" in metrics


def test_without_keys_there_is_one_tenant():
    with serve(make_llm(chat=False), ServerSettings(port=0, cross_request_tokens=4096)) as s:
        c = _client(s, "anything")
        _complete(c, SECRET)
        assert _cross(_complete(c, HALF))["drafted"] > 0


def test_off_by_default():
    with serve(make_llm(chat=False), ServerSettings(port=0)) as s:
        c = _client(s, "x")
        _complete(c, SECRET)
        assert _cross(_complete(c, HALF)) is None


def test_the_index_persists_across_restarts_and_a_corrupt_file_is_skipped(tmp_path, caplog):
    with serve(make_llm(chat=False), _settings(index_dir=tmp_path)) as s:
        _complete(_client(s, "key-a"), SECRET)
    files = list(tmp_path.glob("*.fxi"))
    assert len(files) == 1 and "key-a" not in files[0].name  # named by a digest, never the key
    with serve(make_llm(chat=False), _settings(index_dir=tmp_path)) as s:  # a restart
        assert _cross(_complete(_client(s, "key-a"), HALF))["drafted"] > 0
        assert _cross(_complete(_client(s, "key-b"), HALF)) is None
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    llm = make_llm(chat=False)
    with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
        with serve(llm, _settings(index_dir=tmp_path)) as s:
            r = _complete(_client(s, "key-a"), HALF)
    assert _cross(r) is None  # skipped: no draft from a file that failed its checks
    assert r.choices[0].text == plain(llm, "complete", HALF, max_tokens=24, temperature=0).text
    assert any("skipping cross-request index" in m for m in caplog.messages)


def test_a_server_without_speculation_refuses_cross_request_indexes():
    from fucina.server import create_app

    with pytest.raises(InvalidOption) as e:
        create_app(make_llm(speculative=False), ServerSettings(port=0, cross_request_tokens=4096))
    assert e.value.param == "cross_request_tokens"


def test_settings_validation():
    with pytest.raises(InvalidOption) as e:
        ServerSettings(index_dir="/tmp/x")
    assert e.value.param == "index_dir"
    with pytest.raises(InvalidOption) as e:
        ServerSettings(cross_request_tokens=-1)
    assert e.value.param == "cross_request_tokens"

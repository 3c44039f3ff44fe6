"""``fucina serve``: flags, API keys, the listening socket and the startup line (no model is served)."""

from __future__ import annotations

import argparse
import logging
import socket

import pytest

from fucina.cli import serve as serve_cli
from fucina.cli.common import CliError, Parser
from tests.server.conftest import make_llm


def parse(*argv: str) -> argparse.Namespace:
    p = Parser(prog="fucina")
    serve_cli.register(p.add_subparsers(dest="command"))
    return p.parse_args(["serve", *argv])


def test_defaults_are_loopback_and_speculative():
    args = parse()
    assert args.handler is serve_cli.run
    assert (args.host, args.port, args.no_spec, args.api_key, args.model) == ("127.0.0.1", 8000, False, [], None)
    s = serve_cli.settings_from_args(args)
    assert s.loopback and s.api_keys == () and s.max_tokens_limit is None and s.max_queue == 16


def test_flags_and_key_file(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\nkey-b\n\n  key-c  \nkey-a\n")
    args = parse("smollm2-135m", "--host", "0.0.0.0", "--port", "0", "--api-key", "key-a", "--api-key-file",
                 str(keys), "--ctx", "2048", "--threads", "1", "--exact", "--no-spec", "--max-queue", "3",
                 "--max-tokens-limit", "256")
    s = serve_cli.settings_from_args(args)
    assert s.api_keys == ("key-a", "key-b", "key-c") and not s.loopback
    assert (s.port, s.max_queue, s.max_tokens_limit) == (0, 3, 256)
    assert (args.model, args.ctx, args.threads, args.exact, args.no_spec) == ("smollm2-135m", 2048, 1, True, True)
    assert "key-a" not in repr(s)  # keys never show in logs
    assert (s.cross_request_tokens, s.index_dir) == (0, None)  # off by default


def test_cross_request_flags(tmp_path):
    s = serve_cli.settings_from_args(parse("--cross-request-tokens", "65536", "--index-dir", str(tmp_path)))
    assert s.cross_request_tokens == 65536 and s.index_dir == tmp_path


@pytest.mark.parametrize("argv,message", [
    (("--port", "70000"), "port"),
    (("--port", "-1"), "serve"),
    (("--max-queue", "x"), "serve"),
    (("--api-key", ""), "api-key"),
    (("--api-key-file", "/nonexistent/keys"), "keys"),
    (("--index-dir", "/tmp/fucina-idx"), "cross_request_tokens"),
    (("--no-spec", "--cross-request-tokens", "1024"), "--no-spec"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    with pytest.raises(CliError) as exc:
        serve_cli.settings_from_args(parse(*argv))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_an_empty_key_file_is_refused(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# nothing\n\n")
    with pytest.raises(CliError, match="no key"):
        serve_cli.settings_from_args(parse("--api-key-file", str(keys)))


def test_a_busy_port_fails_before_the_model_loads(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        monkeypatch.setattr(serve_cli, "llm_from_args", lambda *a, **k: pytest.fail("model loaded"))
        with pytest.raises(CliError, match="cannot listen"):
            serve_cli.run(parse("--port", str(port)))


def test_run_logs_one_startup_line_and_serves(monkeypatch, caplog):
    import uvicorn

    llm = make_llm()
    seen = {}
    def fake_llm(args, speculative, prefix_cache_bytes):
        seen.update(spec=speculative, prefix=prefix_cache_bytes)
        return llm

    monkeypatch.setattr(serve_cli, "llm_from_args", fake_llm)

    def fake_run(self, sockets=None):
        seen["sockets"] = sockets
        seen["app"] = self.config.app

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    with caplog.at_level(logging.INFO, logger="fucina.server"):
        assert serve_cli.run(parse("--port", "0", "--api-key", "k")) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fucina serve:")]
    assert len(lines) == 1
    port = seen["sockets"][0].getsockname()[1] if seen["sockets"][0].fileno() != -1 else None
    assert "http://127.0.0.1:" in lines[0] and "/v1 model=fake level=exact speculation=on" in lines[0]
    assert "(API key required)" in lines[0] and port is None  # the socket was closed after serving
    assert seen["spec"] is True and seen["app"].state.fucina.settings.api_keys == ("k",)
    assert seen["prefix"] == 2**30  # the prefix cache's default budget, 1 GiB


def test_prefix_cache_flag(capsys):
    from fucina.cli import main

    assert parse().prefix_cache_mb == 1024 and parse("--prefix-cache-mb", "0").prefix_cache_mb == 0
    assert parse("--prefix-cache-mb", "4096").prefix_cache_mb == 4096
    assert main(["serve", "--prefix-cache-mb", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--prefix-cache-mb" in err and "\n" not in err and "Traceback" not in err


def test_the_context_defaults_to_the_models_and_a_bad_ctx_is_one_line(capsys):
    from fucina.cli import main

    assert parse().ctx is None  # the model's trained context, capped by memory
    assert parse("--ctx", "2048").ctx == 2048
    for bad in ("0", "8", "-5", "lots"):
        with pytest.raises(CliError) as exc:
            parse("--ctx", bad)
        assert "--ctx" in str(exc.value) and "\n" not in str(exc.value)
        assert main(["serve", "--ctx", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert "--ctx" in err and "\n" not in err and "Traceback" not in err


def test_engine_measuring_commands_keep_a_short_context():
    from fucina.cli import build_parser

    p = build_parser()
    assert p.parse_args(["calibrate"]).ctx == 4096 and p.parse_args(["doctor"]).ctx == 4096
    assert p.parse_args(["generate", "--prompt", "x"]).ctx is None and p.parse_args(["chat"]).ctx is None


def test_served_model_names_flag():
    assert parse().served_model_name == [] and serve_cli.settings_from_args(parse()).served_model_names == ()
    s = serve_cli.settings_from_args(parse("--served-model-name", "gpt-4o-mini", "local", "--port", "0"))
    assert s.served_model_names == ("gpt-4o-mini", "local")
    with pytest.raises(CliError, match="served"):
        serve_cli.settings_from_args(parse("--served-model-name", " padded"))
    with pytest.raises(CliError):
        parse("--served-model-name")  # at least one name


def test_run_logs_the_context_and_the_served_names(monkeypatch, caplog):
    import uvicorn

    llm = make_llm()
    monkeypatch.setattr(serve_cli, "llm_from_args", lambda args, speculative, prefix_cache_bytes: llm)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    with caplog.at_level(logging.INFO, logger="fucina.server"):
        assert serve_cli.run(parse("--port", "0", "--served-model-name", "a", "b")) == 0
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if m.startswith("context ")] == [f"context {llm.context_choice.describe()}"]
    assert "context 4096 tokens (as requested" in said[said.index(f"context {llm.context_choice.describe()}")]
    assert "served model names: a, b, fake" in said
    assert "prefix cache: up to 1024 MiB of earlier prompts' KV cache (--prefix-cache-mb)" in said
    assert any("model=a " in m for m in said if m.startswith("fucina serve:"))

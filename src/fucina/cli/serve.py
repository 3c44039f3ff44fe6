"""``fucina serve``: the OpenAI-compatible HTTP server over one model (see :mod:`fucina.server`).

Listens on 127.0.0.1 by default; ``--host 0.0.0.0`` exposes it (give it an ``--api-key`` then).
Keys come from ``--api-key`` (repeatable) and ``--api-key-file`` (one key a line; blank lines and
``#`` comments skipped). ``--served-model-name A B`` makes requests for ``A`` or ``B`` (and the model's
own name) accepted, ``A`` reported. Logs go to stderr: at startup the URL, model and level, then the
context and why it has that size; one line per request.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import sys
import threading

from fucina.cli.common import CliError, add_model_args, llm_from_args, positive_int, read_text

log = logging.getLogger("fucina.server")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand."""
    from fucina.prefix_cache import DEFAULT_MAX_BYTES
    from fucina.server.settings import DEFAULT_MAX_QUEUE

    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (chat and completions, streaming)",
                       description="Serve one model over an OpenAI-compatible HTTP API (/v1/chat/completions, "
                                   "/v1/completions, /v1/models, /health, /metrics).")
    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=positive_int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="accept Authorization: Bearer KEY (repeatable); none given = no authentication")
    p.add_argument("--api-key-file", metavar="FILE", help="file of accepted keys, one a line")
    p.add_argument("--no-spec", action="store_true", help="plain decoding (no speculation)")
    p.add_argument("--cost-table", metavar="FILE",
                   help="verify cost table (JSON from `fucina calibrate --out`); default: measured once and cached")
    p.add_argument("--max-queue", type=positive_int, default=DEFAULT_MAX_QUEUE,
                   help=f"requests that may wait while one runs; more get 429 (default {DEFAULT_MAX_QUEUE})")
    p.add_argument("--max-tokens-limit", type=positive_int, default=0, metavar="N",
                   help="most tokens a request may generate (default 0: up to the context length)")
    p.add_argument("--cross-request-tokens", type=positive_int, default=0, metavar="N",
                   help="keep each tenant's (API key's) earlier prompts and outputs, up to N tokens, "
                        "and draft its later requests from them; never across tenants (default 0: off)")
    p.add_argument("--prefix-cache-mb", type=positive_int, default=DEFAULT_MAX_BYTES // 2**20, metavar="MB",
                   help="KV-cache snapshots kept between requests, so a prompt sent again or a conversation resumed "
                        f"after others is not read again (default {DEFAULT_MAX_BYTES // 2**20}; 0: the last "
                        "request's only)")
    p.add_argument("--index-dir", metavar="DIR",
                   help="persist the cross-request indexes in DIR across restarts (needs --cross-request-tokens)")
    p.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                   help="names requests may give as `model` (the first is the id responses report; give MODEL "
                        "before this flag); the model's own name stays accepted. Default: its short name or file stem")
    p.set_defaults(handler=run)


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The keys of --api-key and --api-key-file (duplicates dropped, order kept)."""
    keys = [k.strip() for k in args.api_key]
    if args.api_key_file:
        for line in read_text(args.api_key_file, "API key file").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                keys.append(line)
        if not keys:
            raise CliError(f"the API key file {args.api_key_file} holds no key")
    if any(not k for k in keys):
        raise CliError("--api-key needs a non-empty key")
    return tuple(dict.fromkeys(keys))


def settings_from_args(args: argparse.Namespace):
    """The :class:`~fucina.server.settings.ServerSettings` of the flags (errors are one-line CliError)."""
    from fucina.errors import InvalidOption
    from fucina.server.settings import ServerSettings

    if args.cost_table:
        from fucina.speculative.costs import CostTable

        try:
            CostTable.load(args.cost_table)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CliError(f"fucina serve: {exc}") from None
    if args.no_spec and args.cross_request_tokens:
        raise CliError("fucina serve: --cross-request-tokens feeds speculation; it cannot be used with --no-spec")
    try:
        return ServerSettings(host=args.host, port=args.port, api_keys=api_keys(args), max_queue=args.max_queue,
                              max_tokens_limit=args.max_tokens_limit or None,
                              cross_request_tokens=args.cross_request_tokens, index_dir=args.index_dir,
                              served_model_names=tuple(args.served_model_name))
    except InvalidOption as exc:
        raise CliError(f"fucina serve: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Load the model and serve until SIGINT/SIGTERM (graceful: running answers finish); returns 0."""
    settings = settings_from_args(args)  # every flag is checked before the model loads
    try:
        import uvicorn

        from fucina.server import create_app
    except ImportError as exc:
        raise CliError(f"fucina serve needs the server extra ({exc.name} is missing): pip install 'fucina[server]'") \
            from None
    _configure_logging()
    sock = _bind(settings.host, settings.port)
    try:
        llm = llm_from_args(args, speculative=not args.no_spec, prefix_cache_bytes=args.prefix_cache_mb * 2**20)
        try:
            app = create_app(llm, settings)
            state = app.state.fucina
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            log.info("fucina serve: http://%s:%d/v1 model=%s level=%s speculation=%s%s", shown, port, state.model_id,
                     state.level, "off" if args.no_spec else "on", " (API key required)" if settings.api_keys else "")
            log.info("context %s", llm.context_choice.describe())
            log.info("prefix cache: up to %d MiB of earlier prompts' KV cache (--prefix-cache-mb)",
                     llm.prefix_cache.max_bytes // 2**20)
            if len(state.model_ids) > 1:
                log.info("served model names: %s", ", ".join(state.model_ids))
            if state.tenants is not None:
                log.info("fucina serve: cross-request indexes of up to %d tokens per tenant%s",
                         settings.cross_request_tokens,
                         f", persisted in {settings.index_dir}" if settings.index_dir else " (in memory)")
            if not settings.loopback and not settings.api_keys:
                log.warning("listening on %s without an API key: anyone who can reach it can use the model",
                            settings.host)
            config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5)
            with _stop_signals():
                try:
                    uvicorn.Server(config).run(sockets=[sock])
                except _Stopped as stop:
                    log.info("fucina serve: stopped (%s)", signal.Signals(stop.signum).name)
        finally:
            llm.close()
    finally:
        sock.close()
    return 0


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_signals():
    """SIGINT/SIGTERM end the server with status 0 (uvicorn shuts down gracefully, then re-raises them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stopped(signum, frame):
        raise _Stopped(signum)

    old = {sig: signal.signal(sig, stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), so a busy port fails before the model loads."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"fucina serve: cannot resolve --host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CliError(f"fucina serve: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("fucina").setLevel(logging.INFO)

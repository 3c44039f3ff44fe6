"""The server's settings: one frozen dataclass, validated at construction."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from fucina.errors import InvalidOption

#: Largest request body accepted (bytes), checked on Content-Length and on the bytes actually read.
DEFAULT_MAX_BODY_BYTES = 1 << 20
#: Requests that may wait for the worker while it runs one (more get 429).
DEFAULT_MAX_QUEUE = 16
#: Longest served model name (characters).
MAX_MODEL_NAME = 256


@dataclass(frozen=True)
class ServerSettings:
    """How ``fucina serve`` answers.

    Args:
        host, port: where to listen (loopback by default; port 0 picks a free one).
        api_keys: accepted ``Authorization: Bearer`` keys; empty = no authentication.
        max_queue: requests that may wait while one runs; a request beyond it gets 429.
        max_tokens_limit: the most tokens one request may ask for (``max_tokens`` above it is a 400;
            a request without ``max_tokens`` gets it as its budget). None = the context length.
        max_body_bytes: largest request body (413 beyond it).
        completion_max_tokens: ``max_tokens`` of ``/v1/completions`` when absent (OpenAI's 16).
        retry_after_seconds: the ``Retry-After`` header of a 429.
        cross_request_tokens: bound of each tenant's cross-request index (its earlier prompts and
            outputs, drafted from by its later requests); 0 = off. A tenant is an API key (one
            tenant without keys); no request ever drafts from another tenant's text.
        index_dir: where tenants' cross-request indexes persist across restarts (None = memory only).
        served_model_names: the names requests may give as ``model`` (vLLM's ``--served-model-name``);
            the first is the id responses report. The model's own id stays accepted besides them.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    max_queue: int = DEFAULT_MAX_QUEUE
    max_tokens_limit: int | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    completion_max_tokens: int = 16
    retry_after_seconds: int = 1
    cross_request_tokens: int = 0
    index_dir: Path | None = None
    served_model_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise InvalidOption("host must be a non-empty string", param="host")
        _int(self.port, "port", 0, 65535)
        keys = tuple(self.api_keys)
        for k in keys:
            if not isinstance(k, str) or not k or k != k.strip() or not k.isprintable():
                raise InvalidOption("API keys must be non-empty printable strings without surrounding spaces",
                                    param="api_keys")
        object.__setattr__(self, "api_keys", keys)
        _int(self.max_queue, "max_queue", 0, 1 << 20)
        if self.max_tokens_limit is not None:
            _int(self.max_tokens_limit, "max_tokens_limit", 1, 1 << 31)
        _int(self.max_body_bytes, "max_body_bytes", 1024, 1 << 30)
        _int(self.completion_max_tokens, "completion_max_tokens", 1, 1 << 31)
        _int(self.retry_after_seconds, "retry_after_seconds", 0, 3600)
        _int(self.cross_request_tokens, "cross_request_tokens", 0, 1 << 30)
        if self.index_dir is not None:
            if not isinstance(self.index_dir, (str, Path)) or not str(self.index_dir):
                raise InvalidOption("index_dir must be a directory path", param="index_dir")
            if not self.cross_request_tokens:
                raise InvalidOption("index_dir persists cross-request indexes; it needs cross_request_tokens > 0",
                                    param="index_dir")
            object.__setattr__(self, "index_dir", Path(self.index_dir))
        if isinstance(self.served_model_names, str):
            raise InvalidOption("served_model_names must be a sequence of names, not one string",
                                param="served_model_names")
        names = tuple(self.served_model_names)
        for name in names:
            if (not isinstance(name, str) or not name or name != name.strip() or not name.isprintable()
                    or len(name) > MAX_MODEL_NAME):
                raise InvalidOption(f"a served model name must be a non-empty printable string of at most "
                                    f"{MAX_MODEL_NAME} characters without surrounding spaces, got {name!r}",
                                    param="served_model_names")
        object.__setattr__(self, "served_model_names", tuple(dict.fromkeys(names)))

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def _int(value: object, name: str, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidOption(f"{name} must be an integer in [{lo}, {hi}], got {value!r}", param=name)

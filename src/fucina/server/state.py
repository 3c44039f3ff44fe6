"""What the server's routes share: :class:`ServerState`, held as ``app.state.fucina``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fucina.server.metrics import Metrics
from fucina.server.settings import ServerSettings
from fucina.server.tenants import TenantIndexes
from fucina.server.worker import Worker

if TYPE_CHECKING:
    from fucina.api import LLM


@dataclass
class ServerState:
    """What the routes share (``app.state.fucina``)."""

    llm: LLM
    settings: ServerSettings
    model_id: str
    level: str
    fingerprint: str
    metrics: Metrics
    worker: Worker
    #: Per-tenant cross-request indexes (None when ``cross_request_tokens`` is 0).
    tenants: TenantIndexes | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    #: Every name a request may give as ``model``, ``model_id`` (the one responses report) first.
    model_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.model_ids = tuple(dict.fromkeys((self.model_id, *self.model_ids)))

    def serves(self, name: str) -> bool:
        """Whether ``name`` is one of the names this server answers to."""
        return name in self.model_ids

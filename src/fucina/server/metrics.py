"""Prometheus text exposition (format 0.0.4), hand-written: counters, gauges and two histograms.

Names (all prefixed ``fucina_``):

* ``requests_total{endpoint,status}`` — finished requests by HTTP status (``499``: the client left);
* ``prompt_tokens_total``, ``cached_tokens_total``, ``completion_tokens_total``;
* ``drafted_tokens_total``, ``accepted_tokens_total`` — speculation (see :mod:`fucina.results`);
* ``engine_faults_total``; ``queue_depth`` and ``busy`` (gauges, read at scrape time);
* ``prefix_slots`` and ``prefix_slot_bytes`` (gauges): the saved KV snapshots;
* ``time_to_first_token_seconds`` (histogram; from the start of the call, queue wait excluded),
  ``queue_wait_seconds`` (histogram) and ``decode_tokens_per_second`` (histogram).
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Callable, Iterable

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
SPEED_BUCKETS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0)

_COUNTERS = {
    "prompt_tokens_total": "Prompt tokens of finished requests.",
    "cached_tokens_total": "Prompt tokens whose KV cache was reused.",
    "completion_tokens_total": "Generated tokens.",
    "drafted_tokens_total": "Tokens drafted and verified by speculation.",
    "accepted_tokens_total": "Drafted tokens the sampler accepted.",
    "engine_faults_total": "Requests that failed inside the engine (500).",
}


class Histogram:
    """Cumulative-bucket histogram (Prometheus semantics: ``le`` upper bounds, +Inf, sum, count)."""

    def __init__(self, buckets: Iterable[float]) -> None:
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        if not math.isfinite(value):
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, acc = [], 0
        for bound, n in zip(self.bounds, self.counts):
            acc += n
            out.append(f'{name}_bucket{{le="{_num(bound)}"}} {acc}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {_num(self.sum)}")
        out.append(f"{name}_count {self.count}")
        return out


class Metrics:
    """The server's counters; thread-safe. Gauges are read from callbacks when scraped."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]] | None = None) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, int], int] = {}
        self._counters = {k: 0 for k in _COUNTERS}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.queue_wait = Histogram(QUEUE_BUCKETS)
        self.speed = Histogram(SPEED_BUCKETS)
        self._gauges = dict(gauges or {})

    def gauge(self, name: str, help_: str, read: Callable[[], float]) -> None:
        """Expose ``fucina_<name>``, the value ``read()`` returns at scrape time."""
        with self._lock:
            self._gauges[name] = (help_, read)

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, int(status))
            self._requests[key] = self._requests.get(key, 0) + 1

    def add(self, name: str, value: int) -> None:
        with self._lock:
            self._counters[name] += int(value)

    def generation(self, *, prompt: int, cached: int, completion: int, drafted: int, accepted: int,
                   ttft: float | None, queue_wait: float, tokens_per_second: float | None) -> None:
        with self._lock:
            c = self._counters
            c["prompt_tokens_total"] += prompt
            c["cached_tokens_total"] += cached
            c["completion_tokens_total"] += completion
            c["drafted_tokens_total"] += drafted
            c["accepted_tokens_total"] += accepted
            if ttft is not None:
                self.ttft.observe(ttft)
            self.queue_wait.observe(queue_wait)
            if tokens_per_second:
                self.speed.observe(tokens_per_second)

    def value(self, name: str) -> int:
        """A counter's value (for tests and logs)."""
        with self._lock:
            return self._counters[name]

    def requests(self, endpoint: str | None = None, status: int | None = None) -> int:
        with self._lock:
            return sum(n for (e, s), n in self._requests.items()
                       if (endpoint is None or e == endpoint) and (status is None or s == status))

    def render(self) -> str:
        """The exposition text."""
        with self._lock:
            lines = ["# HELP fucina_requests_total Finished requests by endpoint and HTTP status.",
                     "# TYPE fucina_requests_total counter"]
            for (endpoint, status), n in sorted(self._requests.items()):
                lines.append(f'fucina_requests_total{{endpoint="{_label(endpoint)}",status="{status}"}} {n}')
            for name, help_ in _COUNTERS.items():
                lines += [f"# HELP fucina_{name} {help_}", f"# TYPE fucina_{name} counter",
                          f"fucina_{name} {self._counters[name]}"]
            for name, help_, hist in (
                ("time_to_first_token_seconds", "Seconds from the start of a call to its first token.", self.ttft),
                ("queue_wait_seconds", "Seconds a request waited for the worker.", self.queue_wait),
                ("decode_tokens_per_second", "Generated tokens per second of decoding, per request.", self.speed),
            ):
                lines += [f"# HELP fucina_{name} {help_}", f"# TYPE fucina_{name} histogram"]
                lines += hist.lines(f"fucina_{name}")
            gauges = list(self._gauges.items())
        for name, (help_, read) in gauges:
            try:
                v = float(read())
            except Exception:  # a gauge callback must never break a scrape
                continue
            lines += [f"# HELP fucina_{name} {help_}", f"# TYPE fucina_{name} gauge", f"fucina_{name} {_num(v)}"]
        return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

"""One worker thread owns the LLM; requests wait for it in a bounded FIFO queue.

A :class:`Job` is one request's generation. The worker calls its ``start`` (validation and
tokenization run here, in the thread that owns the model, before any forward), then pulls the
chunk iterator and posts every chunk to the job's :class:`Channel`, which the request's asyncio
handler reads. Between two chunks the worker checks the job's cancel flag: a client that went away
stops its generation at the next chunk — the iterator is closed, the LLM's generator settles its
KV cache in its ``finally`` — and the next job starts.

Failures: a :class:`~fucina.errors.FucinaError` that is a ``ValueError`` is the caller's fault
(posted as ``("error", exc)``; the app answers 400), whether ``start`` raised it (validation, before
any work) or the generation did (e.g. the sampler refusing a value). Anything else is an engine fault:
it is logged with its traceback, the LLM's KV cache is reset, the job gets ``("fault", message)``
(a 500), and the worker carries on with the next job.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Callable, Iterator

from fucina.errors import FucinaError

log = logging.getLogger("fucina.server")


class QueueFull(Exception):
    """The FIFO holds ``max_queue`` waiting jobs already."""


class Channel:
    """Events from the worker thread to one asyncio consumer, in order; nothing is ever dropped."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[tuple[str, Any]] = collections.deque()
        self._ready = asyncio.Event()

    def post(self, kind: str, payload: Any = None) -> None:
        """Called from any thread."""
        self._items.append((kind, payload))
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass

    async def get(self, timeout: float | None = None) -> tuple[str, Any] | None:
        """The next event, or None after ``timeout`` seconds without one."""
        while not self._items:
            self._ready.clear()
            if self._items:
                break
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        return self._items.popleft()


class Job:
    """One request: ``start()`` (run by the worker) returns its iterator of chunks.

    Events on :attr:`channel`: ``("started", None)`` once ``start`` returned, then ``("chunk", c)``
    for each chunk and ``("done", None)``; or ``("error", exc)`` (invalid request, before any work),
    ``("fault", message)`` (engine fault) or ``("closed", None)`` (the server is shutting down).
    """

    def __init__(self, start: Callable[[], Iterator[Any]], loop: asyncio.AbstractEventLoop) -> None:
        self._start = start
        self.channel = Channel(loop)
        self._cancel = threading.Event()
        self.submitted = time.perf_counter()
        self.started: float | None = None

    def cancel(self) -> None:
        """Stop at the next chunk (or skip the job if it has not started); idempotent, any thread."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def queue_seconds(self) -> float:
        return (self.started or time.perf_counter()) - self.submitted


class Worker:
    """The thread that owns ``llm`` and runs jobs one at a time in FIFO order.

    ``max_queue`` jobs may wait while one runs; :meth:`submit` raises :class:`QueueFull` beyond that.
    ``on_fault`` is called (in the worker thread) after an engine fault was handled.
    """

    def __init__(self, llm, max_queue: int, on_fault: Callable[[], None] | None = None) -> None:
        self.llm = llm
        self.max_queue = max_queue
        self._on_fault = on_fault
        self._cv = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- control ------------------------------------------------------------------------------

    def start(self) -> None:
        with self._cv:
            if self._thread is not None:
                return
            self._closed = False
            self._thread = threading.Thread(target=self._loop, name="fucina-worker", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking jobs, cancel the running one and answer the waiting ones; join the thread."""
        with self._cv:
            self._closed = True
            waiting, self._waiting = list(self._waiting), collections.deque()
            running = self._running
            self._cv.notify_all()
        for job in waiting:
            job.cancel()
            job.channel.post("closed")
        if running is not None:
            running.cancel()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the worker did not stop within %.0f s", timeout)

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closed:
                raise QueueFull("the server is shutting down")
            self._prune()
            if len(self._waiting) >= self.max_queue and (self._running is not None or self._waiting):
                raise QueueFull(f"{len(self._waiting)} requests are waiting already")
            self._waiting.append(job)
            self._cv.notify()

    @property
    def depth(self) -> int:
        """Jobs waiting (the running one not counted)."""
        with self._cv:
            self._prune()
            return len(self._waiting)

    @property
    def busy(self) -> bool:
        return self._running is not None

    def _prune(self) -> None:
        if any(j.cancelled for j in self._waiting):
            self._waiting = collections.deque(j for j in self._waiting if not j.cancelled)

    # -- the thread ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._waiting:
                    self._cv.wait()
                if self._closed:
                    return
                job = self._waiting.popleft()
                if job.cancelled:
                    continue
                self._running = job
            try:
                self._serve(job)
            except BaseException:  # pragma: no cover - _serve handles everything it can
                log.exception("worker loop failure")
            finally:
                with self._cv:
                    self._running = None

    def _serve(self, job: Job) -> None:
        job.started = time.perf_counter()
        try:
            chunks = job._start()
        except FucinaError as exc:
            if isinstance(exc, ValueError):
                job.channel.post("error", exc)
            else:
                self._fault(job, exc)
            return
        except Exception as exc:
            self._fault(job, exc)
            return
        job.channel.post("started")
        try:
            for chunk in chunks:
                job.channel.post("chunk", chunk)
                if job.cancelled:
                    break
        except Exception as exc:
            self._close(chunks)
            if isinstance(exc, FucinaError) and isinstance(exc, ValueError):
                # A value of the request the engine could not use (the LLM settled its cache).
                log.warning("request refused during generation: %s", exc)
                job.channel.post("error", exc)
            else:
                self._fault(job, exc)
            return
        self._close(chunks)
        job.channel.post("done")

    @staticmethod
    def _close(chunks: Any) -> None:
        close = getattr(chunks, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # pragma: no cover - the LLM's generator settles in its finally
                log.exception("closing a generation failed")

    def _fault(self, job: Job, exc: BaseException) -> None:
        log.error("engine fault: %s: %s", type(exc).__name__, exc, exc_info=exc)
        try:
            reset = getattr(self.llm, "reset", None)
            if reset is not None:
                reset()
        except Exception:
            log.exception("resetting the KV cache after a fault failed")
        if self._on_fault is not None:
            self._on_fault()
        job.channel.post("fault", f"{type(exc).__name__}: {exc}"[:300])

"""The worker on its own: FIFO order, the bounded queue, cancellation, shutdown, faults."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fucina.errors import InvalidOption
from fucina.server.worker import Job, QueueFull, Worker


class FakeLLM:
    def __init__(self) -> None:
        self.forgotten = 0

    def reset(self) -> None:
        self.forgotten += 1


def _gen(items, order, name, gate=None):
    def start():
        order.append(name)

        def chunks():
            for i in items:
                if gate is not None:
                    gate.wait(5)
                yield i
        return chunks()
    return start


async def _drain(job: Job) -> list:
    events = []
    while True:
        e = await asyncio.wait_for(job.channel.get(), 5)
        events.append(e)
        if e[0] in ("done", "error", "fault", "closed"):
            return events


def test_fifo_order_bounded_queue_and_skipped_cancelled_jobs():
    async def main():
        loop = asyncio.get_running_loop()
        w = Worker(FakeLLM(), max_queue=2)
        w.start()
        order: list = []
        gate = threading.Event()
        first = Job(_gen([1, 2], order, "first", gate), loop)
        w.submit(first)
        while not w.busy:
            await asyncio.sleep(0.005)
        second, third = Job(_gen([3], order, "second"), loop), Job(_gen([4], order, "third"), loop)
        w.submit(second)
        w.submit(third)
        with pytest.raises(QueueFull):
            w.submit(Job(_gen([5], order, "fourth"), loop))
        assert w.depth == 2
        second.cancel()  # left while waiting: never started
        assert w.depth == 1
        gate.set()
        a, c = await _drain(first), await _drain(third)
        assert [e for e in a if e[0] == "chunk"] == [("chunk", 1), ("chunk", 2)]
        assert a[0] == ("started", None) and c[-1] == ("done", None)
        assert order == ["first", "third"]
        w.close()

    asyncio.run(main())


def test_cancel_stops_at_the_next_chunk_and_faults_reset_the_cache():
    async def main():
        loop = asyncio.get_running_loop()
        llm = FakeLLM()
        w = Worker(llm, max_queue=4)
        w.start()
        closed = threading.Event()

        def endless():
            def chunks():
                try:
                    i = 0
                    while True:
                        i += 1
                        yield i
                finally:
                    closed.set()
            return chunks()

        job = Job(endless, loop)
        w.submit(job)
        assert (await job.channel.get(5))[0] == "started"
        await job.channel.get(5)
        job.cancel()
        assert await asyncio.to_thread(closed.wait, 5)

        def bad_value():
            raise InvalidOption("temperature is wrong", param="temperature")

        def broken():
            def chunks():
                yield 1
                raise RuntimeError("engine on fire")
            return chunks()

        j1, j2 = Job(bad_value, loop), Job(broken, loop)
        w.submit(j1)
        w.submit(j2)
        e1, e2 = await _drain(j1), await _drain(j2)
        assert e1[-1][0] == "error" and e1[-1][1].param == "temperature"
        assert e2[-1] == ("fault", "RuntimeError: engine on fire")
        assert llm.forgotten == 1  # the fault reset the cache, the invalid value did not
        w.close()

    asyncio.run(main())


def test_close_answers_waiting_jobs_and_cancels_the_running_one():
    async def main():
        loop = asyncio.get_running_loop()
        w = Worker(FakeLLM(), max_queue=4)
        w.start()
        started = threading.Event()

        def slow():
            def chunks():
                started.set()
                for i in range(10_000):
                    threading.Event().wait(0.001)
                    yield i
            return chunks()

        running, waiting = Job(slow, loop), Job(slow, loop)
        w.submit(running)
        w.submit(waiting)
        assert await asyncio.to_thread(started.wait, 5)
        await asyncio.to_thread(w.close, 5)
        assert (await _drain(waiting))[-1] == ("closed", None)
        assert (await _drain(running))[-1] == ("done", None)
        with pytest.raises(QueueFull):
            w.submit(Job(slow, loop))

    asyncio.run(main())

"""The status loop's wake-up (executor/wakeup.py): every set wakes the loop after it, and a
burst of sets costs the loop one wake-up, on a real event loop in its own thread, as the
status loop runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from snakemake_executor_plugin_dask_slurm.executor.wakeup import Wakeup

#: The status loop's fallback interval is 1 s: a wait that lasts it was not woken.
TIMEOUT = 1.0


class StatusLoop:
    """A thread running an asyncio loop that waits on the wake-up and drains a queue, as
    the executor's status loop drains the dispatcher; counts the loop's wake-up calls."""

    def __init__(self, wakeup: Wakeup) -> None:
        self.wakeup = wakeup
        self.items: deque[int] = deque()
        self.drained: list[int] = []
        self.timeouts = 0
        self.calls = 0
        self.stop = False
        self.ready = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self.run(),))
        self.thread.start()
        assert self.ready.wait(10)

    async def run(self) -> None:
        loop: Any = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counted(*args: Any) -> Any:
            self.calls += 1
            return real(*args)

        loop.call_soon_threadsafe = counted
        waiting = asyncio.ensure_future(self.wakeup.wait(TIMEOUT))  # makes the event
        await asyncio.sleep(0)
        self.ready.set()
        while not self.stop:
            began = time.monotonic()
            await waiting
            if time.monotonic() - began >= TIMEOUT * 0.9:
                self.timeouts += 1
            while self.items:
                self.drained.append(self.items.popleft())
            waiting = asyncio.ensure_future(self.wakeup.wait(TIMEOUT))
        waiting.cancel()

    def close(self) -> None:
        self.stop = True
        self.wakeup.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_a_burst_of_sets_is_one_wake_up() -> None:
    wakeup = Wakeup()
    loop = StatusLoop(wakeup)
    try:
        for i in range(1000):
            loop.items.append(i)
            wakeup.set()
        deadline = time.monotonic() + 5
        while len(loop.drained) < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.drained == list(range(1000))
        assert loop.timeouts == 0  # woken, not by the fallback interval
        assert loop.calls < 100  # one per set before: 1,000
    finally:
        loop.close()


def test_every_set_wakes_the_loop_after_it() -> None:
    """Items put in one by one, from two threads, while the loop wakes and drains: none
    waits for the fallback interval (a lost wake-up would)."""
    wakeup = Wakeup()
    loop = StatusLoop(wakeup)
    try:

        def produce(start: int) -> None:
            for i in range(start, start + 300):
                loop.items.append(i)
                wakeup.set()
                time.sleep(0.0005 if i % 3 else 0)

        producers = [threading.Thread(target=produce, args=(k * 1000,)) for k in range(2)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join(30)
        deadline = time.monotonic() + 5
        while len(loop.drained) < 600 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(loop.drained) == [*range(300), *range(1000, 1300)]
        assert loop.timeouts == 0
    finally:
        loop.close()


def test_a_set_before_the_first_wait_or_after_the_loop_closed_is_nothing() -> None:
    wakeup = Wakeup()
    wakeup.set()  # no loop yet: the first wait makes the event

    async def first() -> float:
        began = time.monotonic()
        await wakeup.wait(0.2)
        return time.monotonic() - began

    assert asyncio.run(first()) >= 0.15  # not woken by the earlier set
    wakeup.set()  # its loop is closed now
    assert not wakeup._queued

"""The status loop's wake-up (executor/wakeup.py): every set wakes the loop after it, a
burst of sets costs the loop one wake-up, and a stream of sets is answered in rounds
``settle`` apart, on a real event loop in its own thread, as the status loop runs."""

from __future__ import annotations

import asyncio
import itertools
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
        self.drained_at: dict[int, float] = {}
        self.rounds: list[float] = []  # when each wait returned
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
            now = time.monotonic()
            self.rounds.append(now)
            if now - began >= TIMEOUT * 0.9:
                self.timeouts += 1
            while self.items:
                item = self.items.popleft()
                self.drained.append(item)
                self.drained_at[item] = now
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


def drained(loop: StatusLoop, count: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while len(loop.drained) < count and time.monotonic() < deadline:
        time.sleep(0.002)
    assert len(loop.drained) == count, loop.drained


def test_a_stream_of_sets_is_answered_in_rounds_settle_apart() -> None:
    """Sets every millisecond for 0.6 s with ``settle`` 0.05: every item drained, by rounds
    at least 0.05 s apart (without the settling: a round every millisecond or two)."""
    settle = 0.05
    wakeup = Wakeup(settle=settle)
    loop = StatusLoop(wakeup)
    try:
        began = time.monotonic()
        i = 0
        while time.monotonic() - began < 0.6:
            loop.items.append(i)
            wakeup.set()
            i += 1
            time.sleep(0.001)
        drained(loop, i)
        assert loop.drained == list(range(i)) and loop.timeouts == 0
        rounds = [t for t in loop.rounds if t >= began]
        gaps = [b - a for a, b in itertools.pairwise(rounds)]
        assert min(gaps) >= settle * 0.95, gaps
        assert len(rounds) <= 0.6 / settle + 3, (len(rounds), i)
    finally:
        loop.close()


def test_a_set_after_a_quiet_spell_is_answered_at_once_and_hurry_ends_the_settling() -> None:
    settle = 0.5
    wakeup = Wakeup(settle=settle)
    loop = StatusLoop(wakeup)
    try:
        loop.items.append(1)
        wakeup.set()
        drained(loop, 1)
        time.sleep(settle + 0.1)  # a quiet spell longer than settle
        set_at = time.monotonic()
        loop.items.append(2)
        wakeup.set()
        drained(loop, 2)
        assert loop.drained_at[2] - set_at < settle / 2, "a set after a quiet spell waited"
        loop.items.append(3)  # right after a round: answered settle after it
        wakeup.set()
        drained(loop, 3)
        assert loop.drained_at[3] - loop.drained_at[2] >= settle * 0.95
        set_at = time.monotonic()
        loop.items.append(4)  # right after a round again, but hurried
        wakeup.hurry()
        drained(loop, 4)
        assert loop.drained_at[4] - set_at < settle / 2, "hurry() did not end the settling"
        assert loop.timeouts == 0
    finally:
        loop.close()


def test_no_settling_while_it_is_not_worth_it() -> None:
    """With few jobs in flight (``worth_it()`` false) a set right after a round is answered
    at once; once it is true again, the next one settles."""
    settle = 0.5
    worth = [False]
    wakeup = Wakeup(settle=settle, worth_it=lambda: worth[0])
    loop = StatusLoop(wakeup)
    try:
        loop.items.append(1)
        wakeup.set()
        drained(loop, 1)
        set_at = time.monotonic()
        loop.items.append(2)  # right after a round, not worth settling
        wakeup.set()
        drained(loop, 2)
        assert loop.drained_at[2] - set_at < settle / 2, "settled though not worth it"
        worth[0] = True
        loop.items.append(3)  # right after a round, worth it
        wakeup.set()
        drained(loop, 3)
        assert loop.drained_at[3] - loop.drained_at[2] >= settle * 0.95
    finally:
        loop.close()

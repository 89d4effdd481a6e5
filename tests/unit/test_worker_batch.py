"""A batch's worker side (worker/batch.py): its jobs' threads, and their ends sent together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from snakemake_executor_plugin_dask_slurm.worker.batch import Ends, Members
from snakemake_executor_plugin_dask_slurm.worker.task import EVENT_TOPIC


def test_members_run_each_call_at_once_and_keep_idle_threads_for_the_next() -> None:
    members = Members(name="test-batch")
    gate = threading.Event()
    seen: list[str] = []

    def held(i: int) -> Callable[[], None]:
        def call() -> None:
            gate.wait(10)
            seen.append(f"held {i}")

        return call

    waiting = [members.start(held(i)) for i in range(3)]
    assert members.threads == 3  # all three at once: none waits for another
    assert not any(done.is_set() for done in waiting)
    gate.set()
    assert all(done.wait(10) for done in waiting)
    again = [members.start(lambda: seen.append("later")) for _ in range(2)]
    assert all(done.wait(10) for done in again)
    assert members.threads == 3  # idle threads took them
    assert sorted(seen) == ["held 0", "held 1", "held 2", "later", "later"]


def test_a_failing_call_still_says_it_is_done_and_its_thread_stays() -> None:
    members = Members(name="test-batch-fail")

    def boom() -> None:
        raise RuntimeError("a bug")

    assert members.start(boom).wait(10)
    assert members.start(lambda: None).wait(10)
    assert members.threads == 1


class LoopWorker:
    """What Ends needs of a Dask worker: its loop (callbacks run when the test says) and
    log_event."""

    def __init__(self) -> None:
        self.callbacks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.events: list[tuple[str, Any]] = []
        self.loop = self

    def add_callback(self, call: Callable[..., Any], *args: Any) -> None:
        self.callbacks.append((call, args))

    def run_loop(self) -> None:
        while self.callbacks:
            call, args = self.callbacks.pop(0)
            call(*args)

    def log_event(self, topic: str, msg: Any) -> None:
        self.events.append((topic, msg))


def test_ends_that_come_before_the_loop_sends_go_as_one_event() -> None:
    ends, worker = Ends(), LoopWorker()
    ends.send(worker, {"key": "a", "ok": True})
    ends.send(worker, {"key": "b", "ok": False})
    assert len(worker.callbacks) == 1  # one trip to the loop for both
    worker.run_loop()
    assert worker.events == [(EVENT_TOPIC, [{"key": "a", "ok": True}, {"key": "b", "ok": False}])]
    ends.send(worker, {"key": "c", "ok": True})  # alone: an event of its own, as one job's
    worker.run_loop()
    assert worker.events[1:] == [(EVENT_TOPIC, {"key": "c", "ok": True})]

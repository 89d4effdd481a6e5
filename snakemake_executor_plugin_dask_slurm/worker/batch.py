"""Several jobs in one Dask task: a *batch* (issue 46).

Dask's scheduler spends about a millisecond on every task (its transitions and messages),
whatever the task does; a farm of short jobs is bounded by that, not by the jobs. So the
plugin may hand over several ready jobs of one rule, with the same resources and priority,
as one Dask task asking for their resources together (:mod:`..dispatch.batching` decides
which). On its worker the batch is only a carrier: each of its jobs

- runs at once, in its own process, as a task of its own would (:func:`.task.report`: the
  same start, log, kill and withdrawal by its own key, usage, warm or cold way);
- sends its own event the moment it ends (its completion reaches Snakemake at once, its
  failure is its own, its usage row its own);
- is named by its own key in the worker's reports of what started; a worker that dies
  under a batch loses exactly the jobs that had not ended (the plugin knows which ended:
  their events came).

The batch's task ends when its last job has ended (its resources are held until then:
which is why only jobs of one rule, expected to take alike, share a batch). It never
raises and returns nothing, as :func:`.task.run_and_report`.

The jobs beyond the first run on :data:`MEMBERS`' threads: daemon threads (a closing
worker never waits for them: its teardown ends the jobs, :mod:`.preload`), kept for the
next batch once idle.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from .task import EVENT_TOPIC, report
from .wire import TaskSpec


class Members:
    """Daemon threads for a batch's jobs: a call goes to an idle thread if there is one,
    else to a new thread, which waits for the next call when it is done."""

    def __init__(self, name: str = "dask-slurm-batch") -> None:
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = 0
        self.threads = 0

    def start(self, call: Callable[[], None]) -> threading.Event:
        """Run ``call`` on a thread of its own now; the event is set once it returned."""
        done = threading.Event()
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self.threads += 1
            else:
                self._idle -= 1  # that idle thread takes this call
        self._calls.put((call, done))
        if spawn:
            threading.Thread(target=self._loop, name=self._name, daemon=True).start()
        return done

    def _loop(self) -> None:
        while True:
            call, done = self._calls.get()
            try:
                call()
            except BaseException:  # a call reports its own errors; the thread stays
                pass
            finally:
                done.set()
            with self._lock:
                self._idle += 1


#: This worker process's threads for the jobs of batches.
MEMBERS = Members()


class Ends:
    """The events of a worker's batch jobs that end at once, sent as one Dask event (a
    list of theirs): the first that ends asks the worker's event loop to send, and every
    end that comes before the loop gets to it goes along. Nothing waits: the loop hop is
    the one ``Worker.log_event`` makes from any thread but the loop's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Any] = []

    def send(self, worker: Any, event: Any) -> None:
        with self._lock:
            first = not self._waiting
            self._waiting.append(event)
        if first:
            worker.loop.add_callback(self._flush, worker)

    def _flush(self, worker: Any) -> None:
        with self._lock:
            events, self._waiting = self._waiting, []
        if events:
            worker.log_event(EVENT_TOPIC, events if len(events) > 1 else events[0])


#: This worker process's batch jobs' ends.
ENDS = Ends()


def run_batch(worker: Any, specs: tuple[TaskSpec, ...], members: Members = MEMBERS) -> None:
    """Run every job of ``specs`` at once on ``worker``, each reported on its own as it
    ends (:func:`.task.report`, through :data:`ENDS`); return when all have ended."""
    others = [
        members.start(functools.partial(report, worker, spec, ENDS.send)) for spec in specs[1:]
    ]
    if specs:
        report(worker, specs[0], ENDS.send)
    for done in others:
        done.wait()


def run_batch_and_report(specs: tuple[TaskSpec, ...]) -> None:
    """The Dask task of a batch (:func:`run_batch` on this task's worker)."""
    from distributed import get_worker

    run_batch(get_worker(), specs)

"""Submit jobs as Dask tasks and collect their outcomes as they finish.

The hot path: ``submit`` runs once per job on Snakemake's scheduling thread, so it only
hands the task to the client (non-blocking) and attaches a done-callback. Completion is
event-driven: the callback records the key and wakes the executor's status loop, which
then ``drain``s every finished task with one batched ``gather``.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .worker_task import JobFailed, TaskOutcome, TaskSpec, kill_tasks, run_task

if TYPE_CHECKING:
    from distributed import Client, Future

logger = logging.getLogger(__name__)

#: Seconds to wait for the workers to confirm a kill request.
KILL_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Finished:
    """A task that is no longer running: success, or the failed job's outcome, or why
    there is no outcome (worker lost, cancelled, ...)."""

    key: str
    ok: bool
    outcome: TaskOutcome | None = None
    problem: str | None = None


def describe_exception(exc: BaseException) -> str:
    """A user-facing sentence for a task that raised instead of returning an outcome."""
    name = type(exc).__name__
    if name == "KilledWorker":
        return (
            "the Dask worker running it was lost (the worker process died or its node "
            f"failed, e.g. out of memory): {exc}"
        )
    if name in ("CancelledError", "FutureCancelledError"):
        return f"its Dask task was cancelled ({exc or name})"
    return f"its Dask task failed with {name}: {exc}"


class Dispatcher:
    """Owns the futures of the jobs currently submitted to Dask."""

    def __init__(self, client: Client, notify: Callable[[], None]):
        self.client = client
        self._notify = notify
        self._futures: dict[str, Future] = {}
        self._finished: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()

    def submit(self, spec: TaskSpec, resources: Mapping[str, float]) -> None:
        future = self.client.submit(
            run_task, spec, key=spec.key, pure=False, resources=dict(resources), retries=0
        )
        with self._lock:
            self._futures[spec.key] = future
        future.add_done_callback(self._on_done)

    def _on_done(self, future: Future) -> None:
        self._finished.append(str(future.key))
        self._notify()

    @property
    def running(self) -> list[str]:
        with self._lock:
            return list(self._futures)

    def drain(self) -> list[Finished]:
        """Every task finished since the last call. Costs no round trip to a worker."""
        keys = []
        while self._finished:
            keys.append(self._finished.popleft())
        if not keys:
            return []
        with self._lock:
            futures = [f for f in map(self._futures.pop, keys, [None] * len(keys)) if f]
        return [self._finished_task(f) for f in futures]

    @staticmethod
    def _finished_task(future: Future) -> Finished:
        key = str(future.key)
        if future.status == "finished":
            return Finished(key, True)
        try:  # the error came to the client with the task's state: no fetch
            error = future.exception(timeout=KILL_TIMEOUT)
        except BaseException as e:  # cancelled, or the client lost the scheduler
            error = e
        if isinstance(error, JobFailed):
            return Finished(key, False, outcome=error.outcome)
        return Finished(key, False, problem=describe_exception(error or RuntimeError(key)))

    def kill(self, keys: list[str]) -> None:
        """Stop the given jobs: kill their processes on every worker, cancel the rest.

        Their futures stay registered, so each still comes out of :meth:`drain` (as
        killed or cancelled) and Snakemake is told about every job it waits for.
        """
        if not keys:
            return
        client: Any = self.client
        try:
            # Client.run has no timeout, and a lost node's worker may never answer.
            killed = client.sync(
                client._run, kill_tasks, keys, on_error="ignore", callback_timeout=KILL_TIMEOUT
            )
            logger.debug("killed on workers: %s", killed)
        except Exception as e:  # workers may already be gone; teardown follows
            logger.debug("kill request failed: %s", e)
        with self._lock:
            futures = [self._futures[k] for k in keys if k in self._futures]
        self.client.cancel(futures)

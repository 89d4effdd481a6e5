"""Submit jobs as Dask tasks and collect their outcomes as they finish.

The hot path: ``submit_many`` runs on Snakemake's scheduling thread for every chunk of a
scheduling round, so it only hands the tasks to the client (non-blocking, one
``Client.map`` — one graph update — per distinct resource request, which costs a third of
one ``Client.submit`` per task) and attaches a done-callback to each. Completion is
event-driven: the callback records the key and wakes the executor's status loop, which
then ``drain``s every finished task. Success needs no result fetch (a failed job raises
on the worker, and its outcome comes with the error Dask already sends the client).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .tasks import Finished, JobFailed, LostWorker, TaskSpec
from .worker_task import KILL_GRACE_SECONDS, kill_tasks, run_task

if TYPE_CHECKING:
    from distributed import Client, Future

logger = logging.getLogger(__name__)

#: Seconds to wait for the workers to confirm a kill request.
KILL_TIMEOUT = 5.0


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


class SubmitFailed(Exception):
    """Dask refused some of a batch (e.g. the client lost its scheduler): ``keys`` were
    not submitted; the rest of the batch was."""

    def __init__(self, keys: list[str], cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.keys = keys


class Dispatcher:
    """Owns the futures of the jobs currently submitted to Dask."""

    def __init__(self, client: Client, notify: Callable[[], None]):
        self.client = client
        self._notify = notify
        self._futures: dict[str, Future] = {}
        self._finished: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()

    def submit(self, spec: TaskSpec, resources: Mapping[str, float]) -> None:
        self.submit_many([(spec, resources)])

    def submit_many(self, tasks: Sequence[tuple[TaskSpec, Mapping[str, float]]]) -> None:
        """Submit jobs, each with its resource request, in one graph update per request.

        Raises :class:`SubmitFailed` naming the jobs Dask did not take."""
        by_request: dict[tuple[tuple[str, float], ...], list[TaskSpec]] = {}
        for spec, resources in tasks:
            by_request.setdefault(tuple(sorted(resources.items())), []).append(spec)
        groups = list(by_request.items())
        for index, (request, specs) in enumerate(groups):
            try:
                futures = self.client.map(
                    run_task,
                    specs,
                    key=[spec.key for spec in specs],
                    pure=False,
                    resources=dict(request),
                    retries=0,
                )
            except Exception as e:
                left = [spec.key for _, rest in groups[index:] for spec in rest]
                raise SubmitFailed(left, e) from e
            with self._lock:
                self._futures.update(zip((spec.key for spec in specs), futures, strict=True))
            for future in futures:
                future.add_done_callback(self._on_done)

    def _on_done(self, future: Future) -> None:
        self._finished.append(str(future.key))
        self._notify()

    def drain(self) -> list[Finished]:
        """Every task finished since the last call. Costs no round trip to a worker."""
        keys = []
        while self._finished:
            keys.append(self._finished.popleft())
        if not keys:
            return []
        with self._lock:
            futures = [f for f in map(self._futures.pop, keys, [None] * len(keys)) if f]
        return [finished_task(f) for f in futures]

    def kill(self, keys: list[str]) -> set[str]:
        """Stop the given jobs on every worker: running ones now, queued ones when their
        turn comes (they then fail at once instead of starting). Returns the keys some
        worker said were running."""
        if not keys:
            return set()
        client: Any = self.client
        try:
            # Client.run has no timeout, and a lost node's worker may never answer.
            killed = client.sync(
                client._run, kill_tasks, keys, on_error="ignore", callback_timeout=KILL_TIMEOUT
            )
        except Exception as e:  # workers may already be gone; teardown follows
            logger.debug("kill request failed: %s", e)
            return set()
        logger.debug("killed on workers: %s", killed)
        return {key for answer in killed.values() if isinstance(answer, list) for key in answer}

    def stop(self, keys: list[str]) -> None:
        """Kill the jobs, let the killed ones end (each is then reported: killed), and
        cancel the rest: queued tasks, and tasks whose worker is gone (a broken cluster),
        so that every job is reported at once, none waits out the kill's grace period
        for a worker that will never answer."""
        running = self.kill(keys)
        deadline = time.monotonic() + KILL_GRACE_SECONDS + 2.0
        while True:
            with self._lock:
                pending = [f for k in keys if (f := self._futures.get(k)) and not f.done()]
            if not any(str(f.key) in running for f in pending) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not pending:
            return
        try:
            self.client.cancel(pending)
        except Exception as e:  # the client may be closing
            logger.debug("cancel failed: %s", e)


def lost_worker(error: BaseException | None) -> LostWorker | None:
    """The dead worker of a ``KilledWorker`` error (None for any other error)."""
    worker = getattr(error, "last_worker", None) if type(error).__name__ == "KilledWorker" else None
    if worker is None:
        return None
    executing = getattr(worker, "executing", None) or {}
    return LostWorker(
        name=str(getattr(worker, "name", None) or getattr(worker, "address", "?")),
        pid=getattr(worker, "pid", None),
        executing=frozenset(str(k) for k in executing),
    )


class WorkerWatch:
    """The scheduler's live workers, kept from its worker add/remove events (pushed to
    the client; no query): the status loop reads ``count`` every round, and must never
    wait on a scheduler that may be gone."""

    def __init__(self, client: Client, on_removed: Callable[[str], None]):
        self._on_removed = on_removed
        self._live: set[str] = set()
        self._lock = threading.Lock()
        # Subscribe before taking the snapshot: an event in between is then not lost.
        client.subscribe_topic("all", self._on_event)
        info = client.scheduler_info(n_workers=-1)
        with self._lock:
            self._live.update(info["workers"])

    @property
    def count(self) -> int:
        return len(self._live)

    def _on_event(self, event: tuple[float, Any]) -> None:
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else {}
        if not isinstance(msg, dict):
            return
        action, address = msg.get("action"), msg.get("worker")
        if not isinstance(address, str):
            return
        if action == "add-worker":
            with self._lock:
                self._live.add(address)
        elif action == "remove-worker":
            with self._lock:
                self._live.discard(address)
            if not msg.get("expected"):
                self._on_removed(address)


def finished_task(future: Future) -> Finished:
    """What became of a task whose future is done."""
    key = str(future.key)
    status = future.status
    if status == "finished":
        return Finished(key, True)
    if status == "error":
        error = future.exception(timeout=KILL_TIMEOUT)  # came with the task's state
        if isinstance(error, JobFailed):
            return Finished(key, False, outcome=error.outcome)
        problem = describe_exception(error or RuntimeError(status))
        return Finished(key, False, problem=problem, lost_on=lost_worker(error))
    reason = getattr(getattr(future, "_state", None), "exception", None)
    return Finished(
        key, False, problem=f"its Dask task was {status}" + (f" ({reason})" if reason else "")
    )

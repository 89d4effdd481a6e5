"""Submit jobs as Dask tasks and collect their outcomes as they finish.

**The plugin holds no Dask result.** Every task is submitted *fire and forget*: once it
finished, Dask forgets it in the same step. A task whose result some client still held
would be run again by Dask if its worker died afterwards (Dask recomputes lost results
that are wanted), and that would run a job twice, the second copy rewriting an output
Snakemake already accepted. So the outcome does not travel as a task result: the task
itself sends it as a Dask event (:func:`..worker.task.run_and_report`, topic
:data:`..worker.task.EVENT_TOPIC`; a list for a batch's jobs that end at once), which the
scheduler pushes to this client; the scheduler's own ``remove-worker`` events (topic
``all``) say which tasks a dead worker held (they fail: see ``scheduler_preload``).

The hot path: ``submit_many`` runs on Snakemake's scheduling thread for every chunk of a
scheduling round, so it only hands the tasks to the client (non-blocking, one
``Client.map`` — one graph update — per distinct resource request and batch size).
Completion is event-driven: the event handler records the outcome and wakes the
executor's status loop, which ``drain``s every finished task and settles it.

**Batches** (``batch_limit`` > 1): jobs of one rule in a chunk may share a Dask task
(:mod:`.batching` decides, :mod:`..worker.batch` runs them). Here jobs are still named by
their own keys (events, what started, kills, withdrawals); only Dask knows the batch's: a
dead worker's batch is its jobs not yet ended; a batch is cancelled only once it carries
nothing else pending; a withdrawal or a stop also moves the unstarted other jobs of the
batches it touches, so that no batch waits holding a job the plugin took back.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..report.detail import detail
from ..worker import timing
from ..worker.batch import run_batch_and_report
from ..worker.task import (
    EVENT_TOPIC,
    KILL_GRACE_SECONDS,
    STARTED_TOPIC,
    kill_tasks,
    run_and_report,
    withdraw_tasks,
)
from ..worker.waiting import wait_until
from ..worker.wire import TaskSpec
from . import batching
from .listeners import Listeners
from .outcomes import Finished, SubmitFailed, WorkerRef, finished_from_event

#: The scheduler's own events (workers added and removed, clients): Dask's topic "all".
SCHEDULER_TOPIC = "all"

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: Seconds to wait for the workers to confirm a kill request, or for the scheduler.
KILL_TIMEOUT = 5.0
#: Why a batch's unstarted job was handed over again: another job of its batch was taken
#: back (a withdrawal or a stop), and a batch never waits holding a job taken back.
BATCH_MOVE = "not started: another job of its batch was taken back; handed over on its own"
#: How the scheduler's stimulus id starts when it removes a worker for silence (distributed
#: 2026.8, ``Scheduler.check_worker_ttl``).
TTL_STIMULUS = "check-worker-ttl"


class Dispatcher:
    """Owns the keys of the jobs currently submitted to Dask, and the live workers."""

    def __init__(
        self,
        client: Client,
        notify: Callable[[], None],
        on_worker_removed: Callable[[WorkerRef, bool], None] = lambda worker, silent: None,
        listeners: Listeners | None = None,
        batch_limit: int = 1,
    ):
        self.client = client
        #: Most jobs one Dask task carries (1: one job per task).
        self.batch_limit = batch_limit
        #: Told of every worker that joins or leaves (the usage report's worker spans).
        self._listeners = listeners if listeners is not None else Listeners()
        self._notify = notify
        self._on_worker_removed = on_worker_removed
        self._pending: set[str] = set()
        #: Keys that ended as lost with their worker, and of those the ones whose job is
        #: known to have run there (an outcome of it came after all).
        self._lost: set[str] = set()
        self._ran: set[str] = set()
        self._finished: collections.deque[Finished] = collections.deque()
        self._lock = threading.Lock()
        #: address -> (name, pid) of every live worker, and what it offers (its resources)
        self._workers: dict[str, tuple[str, int | None]] = {}
        self._offers: dict[str, dict[str, float]] = {}
        #: Which pending job is in which batch.
        self._batches = batching.Batches()

        #: Keys a worker said it started (and that have not finished since).
        self._started: set[str] = set()
        # Subscribe before taking the snapshot: an event in between is then not lost.
        client.subscribe_topic(EVENT_TOPIC, self._on_job_event)
        client.subscribe_topic(STARTED_TOPIC, self._on_started_event)
        client.subscribe_topic(SCHEDULER_TOPIC, self._on_scheduler_event)
        self._learn_workers(
            client.scheduler_info(n_workers=-1)["workers"], client.run(os.getpid, on_error="ignore")
        )

    # -- submission (Snakemake's scheduling thread) ------------------------------------

    def submit_many(self, tasks: Sequence[tuple[TaskSpec, Mapping[str, float]]]) -> None:
        """Submit jobs, each with its resource request, in one graph update per request
        and priority (Snakemake's: the highest first, so that a worker holding them runs
        them in that order, as Snakemake's own executor would).

        Raises :class:`SubmitFailed` naming the jobs Dask did not take."""
        from distributed import fire_and_forget

        by_request: dict[tuple[float, tuple[tuple[str, float], ...]], list[TaskSpec]] = {}
        for spec, resources in tasks:
            group = (spec.priority, tuple(sorted(resources.items())))
            by_request.setdefault(group, []).append(spec)
        groups = sorted(by_request.items(), key=lambda item: -item[0][0])
        handed: set[str] = set()  # jobs of maps Dask took (a group may take several)
        for index, ((priority, request), specs) in enumerate(groups):
            try:
                self._submit_group(specs, dict(request), priority, fire_and_forget, handed)
            except Exception as e:
                left = [s.key for _, rest in groups[index:] for s in rest if s.key not in handed]
                with self._lock:
                    self._pending.difference_update(left)
                    for key in left:
                        self._batches.ended(key)
                raise SubmitFailed(left, e) from e

    def _submit_group(
        self,
        specs: list[TaskSpec],
        request: dict[str, float],
        priority: float,
        fire_and_forget: Callable[[Any], None],
        handed: set[str],
    ) -> None:
        """Jobs of one request and priority: a ``Client.map`` for the single jobs, one per
        batch size; the jobs of each map Dask took are added to ``handed``."""
        if self.batch_limit > 1:
            singles, batches = batching.plan(
                specs, request, list(self._offers.values()), self.batch_limit, self._batches.long
            )
        else:
            singles, batches = specs, []
        with self._lock:
            self._pending.update(spec.key for spec in specs)
            if self.batch_limit > 1:
                self._batches.handed(specs)
            for batch in batches:
                if self._batches.add(batch):  # once per rule, in the detail log
                    rule, size = batch[0].batch, len(batch)
                    detail.info("rule %s: its jobs go several per Dask task (%d here)", rule, size)
        # Batches first (a worker starts equal priorities in order; a batch needs all its slots)
        calls: list[tuple[Any, list[Any], list[str], dict[str, float]]] = []
        for size in sorted({len(batch) for batch in batches}, reverse=True):
            alike = [tuple(batch) for batch in batches if len(batch) == size]
            keys = [batching.batch_key(batch) for batch in alike]
            calls.append((run_batch_and_report, alike, keys, batching.scaled(request, size)))
        if singles:
            calls.append((run_and_report, singles, [s.key for s in singles], request))
        for function, items, keys, resources in calls:
            jobs = [s.key for batch in items for s in batch] if items is not singles else keys
            futures = self.client.map(
                function,
                items,
                key=keys,
                pure=False,
                resources=resources,
                # Typed int, compared as a number: Snakemake's may be a float.
                priority=priority,  # type: ignore[arg-type]
                retries=0,
            )
            fire_and_forget(futures)  # and the futures go: see the module's docstring
            handed.update(jobs)

    # -- completion (the client's event thread) ----------------------------------------

    def _finish(self, finished: Finished) -> None:
        if timing.ON:
            timing.record("noticed", finished.key, time.time())
        with self._lock:
            key = finished.key
            if key not in self._pending:
                if key not in self._lost or not (finished.ok or finished.outcome):
                    return  # already finished otherwise (e.g. cancelled)
                # Its worker was lost, then the job's own outcome arrived: it ran. A success
                # is one (the job ended, nothing runs it again yet); a failure only says so.
                self._ran.add(key)
                if not finished.ok:
                    return
            self._pending.discard(key)
            if self._batches:
                self._batches.ended(key, finished.seconds if finished.ok else None)
            if finished.lost_on is not None:
                self._lost.add(key)
            else:
                self._started.discard(key)
            self._finished.append(finished)
        self._notify()

    def note_ran(self, key: str) -> None:
        """The job of ``key`` is known to have run: its failure came from its worker, which
        is then taken for lost with its worker job (see executor/failures.py)."""
        with self._lock:
            self._ran.add(key)

    def ran(self, key: str) -> bool:
        """Whether the job of ``key``, lost with its worker, is known to have run there:
        its worker said it started, or its own outcome came after all."""
        return key in self._ran or key in self._started

    def _on_started_event(self, event: tuple[float, Any]) -> None:
        keys = event[1] if isinstance(event, tuple) and len(event) == 2 else None
        # A list as the worker sent it, or a tuple: how it arrives depends on the route
        # (msgpack in the scheduler's event log turns lists into tuples, as in sbatch mode).
        if isinstance(keys, (list, tuple)):
            with self._lock:
                self._started.update(k for k in keys if k in self._pending or k in self._lost)

    def _on_job_event(self, event: tuple[float, Any]) -> None:
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else None
        for one in msg if isinstance(msg, (list, tuple)) else (msg,):
            if isinstance(one, dict) and (finished := finished_from_event(one)) is not None:
                self._finish(finished)

    def _on_scheduler_event(self, event: tuple[float, Any]) -> Any:
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else None
        if not isinstance(msg, dict) or not isinstance(msg.get("worker"), str):
            return None
        address = msg["worker"]
        if msg.get("action") == "add-worker":
            return self._refresh_workers()
        if msg.get("action") != "remove-worker":
            return None
        name, pid = self._workers.pop(address, (address, None))
        self._offers.pop(address, None)
        self._listeners.worker_left(name)
        lost = WorkerRef(name, pid)
        # Dask removes a worker that missed its heartbeats for worker-ttl (stopped, hung).
        silent = str(msg.get("stimulus_id", "")).startswith(TTL_STIMULUS)
        problem = f"its Dask worker {name} {'stopped answering' if silent else 'died'}"
        # A batch's jobs that had not ended (those that ended told so: no longer pending).
        for key in self.jobs_of([str(key) for key in msg.get("processing-tasks") or ()]):
            self._finish(Finished(key, False, problem=problem, lost_on=lost))
        if not msg.get("expected"):
            self._on_worker_removed(lost, silent)
        self._notify()
        return None

    async def _refresh_workers(self) -> None:
        client: Any = self.client
        try:
            info = await client.scheduler.identity(n_workers=-1)
            pids = await client._run(os.getpid, on_error="ignore")
        except Exception as e:  # the next add-worker event tries again
            logger.debug("could not read the workers: %s", e)
            return
        self._learn_workers(info.get("workers", {}), pids)

    def _learn_workers(
        self, workers: Mapping[str, Mapping[str, Any]], pids: Mapping[str, Any]
    ) -> None:
        """Name and pid of each worker: the pid names its supervisor's record."""
        for address, info in workers.items():
            pid = pids.get(address)
            self._workers[address] = (
                str(info.get("name", address)),
                pid if isinstance(pid, int) else None,
            )
            offered = info.get("resources")
            self._offers[address] = dict(offered) if isinstance(offered, Mapping) else {}
        self._listeners.workers_seen(workers)

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    def jobs_of(self, dask_keys: Sequence[str]) -> list[str]:
        """The jobs of these Dask tasks (as the scheduler names them: a batch's key stands
        for its jobs still pending; any other key is a job's own)."""
        with self._lock:
            return self._batches.jobs_of(dask_keys)

    def drain(self) -> list[Finished]:
        """Every task finished since the last call. Costs no round trip to a worker."""
        found = []
        while self._finished:
            found.append(self._finished.popleft())
        return found

    # -- stopping ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop listening to the scheduler's events, before the client closes: they would
        include this client's own removal, sent to it as it closes (a CRITICAL traceback
        in the scheduler's log at every run's end, "Closed comm ... while trying to
        write"). The jobs' events keep coming while the cluster closes."""
        with contextlib.suppress(Exception):  # a client whose scheduler is gone
            self.client.unsubscribe_topic(SCHEDULER_TOPIC)

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

    def withdraw(
        self, keys: list[str], move: str | None = None, mates: bool = True
    ) -> dict[str, float] | None:
        """Of ``keys``, return those running on some worker (with when each started); take
        every other one back (it never starts: cancelled on the scheduler, finished here as
        withdrawn, or, with ``move`` (why), as to go elsewhere). None, withdrawing nothing,
        when the workers could not be asked. With ``mates``, the unstarted other jobs of
        their batches are moved too (:data:`BATCH_MOVE`)."""
        if not keys:
            return {}
        with self._lock:
            asked = [*keys, *self._batches.mates(keys)] if mates else list(keys)
        client: Any = self.client
        try:
            answers = client.sync(
                client._run, withdraw_tasks, asked, on_error="ignore", callback_timeout=KILL_TIMEOUT
            )
        except Exception as e:  # the workers may be gone; the caller stops what runs
            logger.debug("withdraw request failed: %s", e)
            return None
        running = {
            key: began
            for answer in answers.values()
            if isinstance(answer, dict)
            for key, began in answer.items()
        }
        with self._lock:
            left = [key for key in asked if key not in running and key in self._pending]
        if left:
            self.cancel(left)
            others = set(asked[len(keys) :])
            for key in left:
                if key in others:  # of a batch that had another job taken back
                    self._finish(Finished(key, False, problem=BATCH_MOVE, too_late=True))
                elif move is None:
                    self._finish(Finished(key, False, problem="withdrawn before it started"))
                else:
                    self._finish(Finished(key, False, problem=move, too_late=True))
        return {key: began for key, began in running.items() if key in set(keys)}

    def stop(self, keys: list[str]) -> set[str]:
        """Kill the jobs, let the killed ones end (each is then reported: killed), and
        cancel the rest: queued tasks, and tasks whose worker is gone (a broken cluster),
        so that every job is reported at once, none waits out the kill's grace period
        for a worker that will never answer. Returns the keys that were running."""
        with self._lock:
            mates = self._batches.mates(keys)
        if mates:  # the other jobs of their batches: moved unless they run (they go on)
            self.withdraw(mates, move=BATCH_MOVE, mates=False)
        running = self.kill(keys)
        wait_until(lambda: not self._pending.intersection(running), KILL_GRACE_SECONDS + 2.0)
        with self._lock:
            left = [key for key in keys if key in self._pending]
        if left:
            self.cancel(left)
            for key in left:
                self._finish(Finished(key, False, problem="its Dask task was cancelled"))
        return running

    def cancel(self, keys: list[str]) -> None:
        """Make the scheduler forget these tasks, fire-and-forget ones too (``force``)."""
        from distributed import Future

        try:
            with self._lock:
                dask_keys = self._batches.carrying_only(keys)
            futures: list[Any] = [Future(key, self.client) for key in dask_keys]
            self.client.cancel(futures, force=True, reason="dask-slurm", msg="stopped")
        except Exception as e:  # the client may be closing
            logger.debug("cancel failed: %s", e)

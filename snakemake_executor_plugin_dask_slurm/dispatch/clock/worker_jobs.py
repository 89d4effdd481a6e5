"""A worker job lands: what becomes of the jobs on its workers (the dispatch side; when it
lands, and its workers' leaving, are the worker jobs' side,
:mod:`...clusters.worker_jobs.landing`).

At the worker job's landing point its workers have been taken out of Dask's running set
(nothing new is placed there) and asks the scheduler which tasks they hold; then
:meth:`WorkerJobLanding.land`:

- takes back at once what has not started (:meth:`..dispatcher.Dispatcher.withdraw`): each
  goes to another worker (:attr:`..outcomes.Finished.too_late`, routed as a move, not a
  failure: nothing ran);
- of the started jobs, lets those expected to end before the worker job's hard stop go
  on, and stops the others now (unknown duration included): each then runs again
  elsewhere, its outputs removed first, counted neither as failed nor as lost with a worker
  (:attr:`..routing.Route.RERUN`); it is expected from then on to take half again what it
  ran, so it goes only where it can finish, or is refused with the numbers;
- at the hard stop, :meth:`WorkerJobLanding.stop` stops whatever still runs there alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ...report.detail import detail
from ..dispatcher import Dispatcher
from ..listeners import JobListener
from ..outcomes import Finished
from ..registry import JobRecord, JobRegistry
from .policy import Durations, Running, after_stop, stop_before


class WorkerJobLanding(JobListener):
    """What a worker job's landing does to the jobs on its workers."""

    def __init__(
        self,
        registry: JobRegistry,
        withdraw: Callable[[list[str], str], dict[str, float] | None],
        kill: Callable[[list[str]], object],
        expected: Callable[[JobRecord], float | None] = lambda record: record.expected,
        learning: Durations | None = None,
        jobs_of: Callable[[Sequence[str]], list[str]] = list,
    ):
        self._registry = registry
        #: The jobs of the Dask tasks the scheduler names (a batch's: its jobs).
        self._jobs_of = jobs_of
        self._expected = expected
        self._withdraw = withdraw
        self._kill = kill
        #: Jobs stopped at a worker job's limit, and moved off a landing worker job.
        self.jobs_stopped = 0
        self.jobs_moved = 0
        #: The rules' durations this learns itself (see :meth:`of`), if any.
        self.learning = learning

    @classmethod
    def of(
        cls, registry: JobRegistry, dispatcher: Dispatcher, durations: Durations | None
    ) -> WorkerJobLanding:
        """The run's, acting through its dispatcher; a job handed over before its rule's
        duration was learned is expected to take what ``durations`` now says (None: the
        run places by no clock; then this learns them itself, as a listener)."""

        def withdraw(keys: list[str], why: str) -> dict[str, float] | None:
            return dispatcher.withdraw(keys, move=why)

        learned = durations if durations is not None else Durations()

        def expected(record: JobRecord) -> float | None:
            if record.expected is not None:
                return record.expected
            estimate = learned.estimate(record.job.name)
            return estimate[0] if estimate is not None else None

        learning = learned if durations is None else None
        return cls(registry, withdraw, dispatcher.kill, expected, learning, dispatcher.jobs_of)

    def ended(self, record: JobRecord, finished: Finished) -> None:
        """What a job that succeeded took, when nothing else of the run learns it."""
        if self.learning is not None and finished.ok and finished.seconds is not None:
            self.learning.add(record.job.name, finished.seconds)

    def land(self, job_id: str, keys: Sequence[str], hard_stop: float) -> tuple[int, int, int]:
        """The jobs ``keys`` held by worker job ``job_id``'s workers when it lands:
        ``(started jobs going on, started jobs stopped, jobs moved unstarted)``."""
        keys = [key for key in self._jobs_of(keys) if self._registry.get(key) is not None]
        if not keys:
            return 0, 0, 0
        why = f"not started: its worker job {job_id} is landing before its time limit"
        # Every worker is asked: a job stolen from these meanwhile may run elsewhere, and a
        # running job must never be taken for a waiting one (a second copy).
        started = self._withdraw(keys, why)
        if started is None:  # the workers could not be asked: every job may have started
            started = {key: 0.0 for key in keys}
        running = [
            Running(record.key, started[record.key] or record.handed_over, self._expected(record))
            for record in self._registry.records(list(started))
        ]
        stop = stop_before(running, hard_stop)
        self._stop(job_id, stop, {job.key: job.since for job in running})
        moved = len(keys) - len(started)
        self.jobs_moved += moved
        return len(running) - len(stop), len(stop), moved

    def stop(self, job_id: str, keys: Sequence[str]) -> int:
        """At worker job ``job_id``'s hard stop: stop ``keys`` (what still runs there)."""
        records = self._registry.records(self._jobs_of(keys))
        self._stop(job_id, [r.key for r in records], {r.key: r.handed_over for r in records})
        return len(records)

    def _stop(self, job_id: str, keys: list[str], since: dict[str, float]) -> None:
        if not keys:
            return
        now = time.time()
        for record in self._registry.records(keys):
            # Set before the kill: its outcome then finds it (routing: run again).
            record.stopped_at_limit = record.key
            ran = now - since.get(record.key, now)
            record.expected = after_stop(self._expected(record), ran)
            detail.info(
                "%s: stopped at worker job %s's landing (it could not finish before its "
                "time limit); it runs again elsewhere, expected to take %.0f s",
                record.key, job_id, record.expected,
            )  # fmt: skip
        self.jobs_stopped += len(keys)
        self._kill(keys)

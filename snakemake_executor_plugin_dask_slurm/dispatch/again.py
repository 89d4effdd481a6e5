"""What becomes of a job whose task ended and did not succeed, as the routing
(:func:`.routing.route`) and the recovery of a dead worker's jobs (:func:`.recovery.decide`)
decided, carried out on the dispatch side: the job failed (Snakemake told, with its
message), run again (a rerun: its outputs removed, a new task ``<first key>-rN``), handed
over again elsewhere (a move: nothing ran, ``<first key>-mN``), or not taken by Dask.

It uses the registry, the placement by time, the dispatcher, the listeners and Snakemake's
callbacks, never the cluster: what asks the cluster first (did the allocation or the worker
job end? are the dead worker's processes gone?) is the executor's, which then calls here.

Threads: Snakemake's status thread (a failure, a move), the recovery thread (a rerun, a
failure after asking SLURM), Snakemake's scheduling thread (:meth:`Again.report_refused`).
Whether a job is still registered, and whether the run stops, is the registry's to say,
under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..report.detail import detail
from ..report.messages import failure_message, job_label
from ..worker.job_log import keep_log
from .clock.placement import Placement
from .dispatcher import Dispatcher
from .listeners import Listeners
from .outcomes import Finished
from .registry import HandedOver, JobRecord, JobRegistry, NotTaken, Refusal


@dataclass(frozen=True)
class Snakemake:
    """What the run tells Snakemake, and how it runs Snakemake's coroutines."""

    succeeded: Callable[[Any], None]
    #: ``failed(info, msg=..., aux_logs=...)``: Snakemake's report_job_error.
    failed: Callable[..., None]
    async_run: Callable[[Coroutine[Any, Any, Any]], Any]
    #: ``submitted(info, register_job=...)``: Snakemake's report_job_submission.
    submitted: Callable[..., None]


class Again:
    """Fail a job, run it again, or hand it over again elsewhere."""

    def __init__(
        self,
        registry: JobRegistry,
        dispatcher: Dispatcher,
        snakemake: Snakemake,
        listeners: Listeners,
        placement: Placement | None = None,
    ):
        self.registry = registry
        self.dispatcher = dispatcher
        self.snakemake = snakemake
        self.listeners = listeners
        #: Where a job handed over again may go, by time (None: anywhere).
        self.placement = placement

    def fail(self, finished: Finished) -> None:
        """Tell Snakemake the job of ``finished`` failed, with its message (nothing if it
        is not registered any more: reported, or left to the run's failure)."""
        record = self.registry.pop(finished.key)
        if record is None:
            return
        stop = self.registry.stop_reason
        problem = finished.problem
        if stop and finished.outcome is None:
            problem = f"stopped: {stop}"
        way = "direct" if record.way == "direct" else "general"  # as the message says it
        msg = failure_message(record.job, finished.outcome, problem, way, record.log)
        keep_log(record.log)  # none yet if it printed nothing: the message names it
        self.snakemake.failed(record.info, msg=msg, aux_logs=[record.log])

    def rerun(self, key: str, finished: Finished | None = None) -> None:
        """Run a lost job (or one stopped at its worker job's limit: ``finished``) again, as
        the same Snakemake attempt, under a new task key, after removing what its copy
        wrote."""
        record = self.registry.claim_for_rerun(key)
        if record is None:
            if finished is not None and self.registry.get(key) is not None:
                self.fail(finished)  # the run stops meanwhile: told with its stop
            return  # reported meanwhile (a late success), or the run stops: not again
        job = record.job
        try:
            self.snakemake.async_run(job.remove_existing_output())
            if record.way == "direct":  # the general way's own Snakemake prepares
                for f in (*job.output, *job.log):
                    f.prepare()
        except Exception as e:
            self.snakemake.failed(
                record.info, msg=f"{job_label(job)} could not be run again: {e}\n"
            )
            return
        self._hand_over_again(record, moved=False)

    def move(self, finished: Finished) -> None:
        """A job that did not start where it was, for lack of time there: hand it over
        again (nothing ran, nothing to remove), to a worker with time for it."""
        record = self.registry.claim_for_rerun(finished.key)
        if record is None:
            if self.registry.get(finished.key) is not None:
                self.fail(finished)  # the run stops meanwhile: told with its stop
            return
        detail.info("%s %s; handed over again", finished.key, finished.problem)
        self._hand_over_again(record, moved=True)

    def _hand_over_again(self, record: JobRecord, moved: bool) -> None:
        job = record.job
        why = self.placement.again(record) if self.placement is not None else None
        if why is not None:  # no worker can ever hold it now
            self.snakemake.failed(record.info, msg=why + "\n")
            return
        spec = record.moved() if moved else record.next_run()
        old_key = record.key
        outcome = self.registry.resubmit(record, spec, self.dispatcher.submit_many, moved)
        if isinstance(outcome, HandedOver):
            if moved:
                self.listeners.moved(old_key, record)
            else:
                self.listeners.handed_over([record])
        elif isinstance(outcome, NotTaken):
            self.report_refused(outcome.refusals)
        else:
            self.snakemake.failed(
                record.info, msg=f"{job_label(job)} was not run again: {outcome.reason}\n"
            )

    def report_refused(self, refusals: list[Refusal]) -> None:
        """Jobs announced to Snakemake that never reached Dask."""
        for info, msg in refusals:
            self.snakemake.failed(info, msg=msg)

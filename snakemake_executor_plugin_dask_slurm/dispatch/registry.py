"""The jobs handed to Dask and not yet reported back to Snakemake, and whether the run is
stopping: the one place a job is registered, handed over, stopped or forgotten.

Every change happens under one lock, so that a stop's snapshot of the registered jobs can
never miss a job being handed over at that moment (Snakemake's scheduling thread submits
while a SIGTERM watcher, the status thread or the recovery thread stop or fail jobs).

Each registered job is a :class:`JobRecord`: Snakemake's record of it, its task, its Dask
request, how it runs, when it was handed over, and what happened to it so far (reruns,
the workers that died under it).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from ..report.messages import job_label
from ..worker.wire import TaskSpec, Way
from .outcomes import SubmitFailed


@dataclass(slots=True)
class JobRecord:
    """One job as the plugin knows it while Dask has it."""

    info: SubmittedJobInfo
    spec: TaskSpec
    #: The Dask resources it asked for.
    request: dict[str, float]
    #: "direct" (its shell command on the worker), "warm" or "cold" (Snakemake's job
    #: command), as it was built (:func:`.way.decide`; its worker may still run it cold).
    way: Way
    #: When it was handed over (``time.time()``).
    handed_over: float = 0.0
    #: How long it is expected to run (the allocation's clock), None: unknown.
    expected: float | None = None
    #: How often it was run again (a worker died under it) and where it was running then.
    reruns: int = 0
    lost_on: list[str] = field(default_factory=list)
    #: Its first task key and log, from which a rerun's are named.
    first_key: str = ""
    first_log: str = ""
    #: How often it was handed over again without having started (its worker had no time
    #: left for it: :attr:`.outcomes.Finished.too_late`).
    moves: int = 0
    #: The task key the plugin stopped at its worker job's landing (it runs again).
    stopped_at_limit: str | None = None
    #: The task key this one replaced (a rerun's or a move's), None for the first.
    previous_key: str | None = None

    def __post_init__(self) -> None:
        self.first_key = self.first_key or self.spec.key
        self.first_log = self.first_log or self.spec.log_path

    @property
    def job(self) -> Any:
        return self.info.job

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def log(self) -> str:
        return self.spec.log_path

    def next_run(self) -> TaskSpec:
        """The task that runs the job again: ``<first key>-rN``, ``<first log>.rerunN.log``."""
        n = self.reruns + 1
        stem = self.first_log.removesuffix(".log")
        return dataclasses.replace(
            self.spec, key=f"{self.first_key}-r{n}", log_path=f"{stem}.rerun{n}.log"
        )

    def moved(self) -> TaskSpec:
        """The task that hands the job over again after it did not start: ``<first
        key>-mN``, the same log (nothing was written to it)."""
        return dataclasses.replace(self.spec, key=f"{self.first_key}-m{self.moves + 1}")


#: A job that did not reach Dask, with the sentence saying why.
Refusal = tuple[SubmittedJobInfo, str]


@dataclass(frozen=True)
class HandedOver:
    """:meth:`JobRegistry.resubmit`: the job runs again under its new key."""


@dataclass(frozen=True)
class NotRerun:
    """:meth:`JobRegistry.resubmit`: the run stops (``reason``): the job is not registered
    any more, and its caller fails it."""

    reason: str


@dataclass(frozen=True)
class NotTaken:
    """:meth:`JobRegistry.resubmit`: Dask did not take it (unregistered, to be failed)."""

    refusals: list[Refusal]


Replaced = HandedOver | NotRerun | NotTaken


@dataclass
class JobRegistry:
    """Registered jobs by task key; the reason the run stops, once it does."""

    #: Where the Dask processes' logs are, for the message when Dask refuses jobs.
    logs: str = ""

    def __post_init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}
        self._lock = threading.Lock()
        self.stop_reason: str | None = None
        #: Set when the cluster broke: every job still registered then fails at once,
        #: with one message for all (see the executor's fail_run).
        self.fatal: str | None = None
        self._quiet: set[str] = set()
        #: What :meth:`take_all` took: their tasks still end (killed, cancelled), and
        #: what they ran is still told (the usage report), though Snakemake is not.
        self._taken: dict[str, JobRecord] = {}

    def in_flight(self) -> int:
        """How many jobs are registered: handed over, not yet told (read without the
        lock)."""
        return len(self._jobs)

    def get(self, key: str) -> JobRecord | None:
        return self._jobs.get(key)

    def taken(self, key: str) -> JobRecord | None:
        """The record of ``key`` if :meth:`take_all` took it."""
        return self._taken.get(key)

    def pop(self, key: str) -> JobRecord | None:
        with self._lock:
            return self._jobs.pop(key, None)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def records(self, keys: Sequence[str]) -> list[JobRecord]:
        """The records of those of ``keys`` still registered."""
        return [record for key in keys if (record := self._jobs.get(key)) is not None]

    def quiet(self, keys: Sequence[str]) -> None:
        """These jobs' failures print nothing: one message explained them all."""
        with self._lock:
            self._quiet.update(keys)

    def is_quiet(self, key: str | None) -> bool:
        """Whether this job's failure was already explained with the whole run's."""
        return key in self._quiet

    def hand_over(
        self,
        records: Sequence[JobRecord],
        announce: Callable[[SubmittedJobInfo], None],
        submit: Callable[[list[tuple[TaskSpec, dict[str, float]]]], None],
    ) -> tuple[list[Refusal], list[Refusal]]:
        """Register, announce (Snakemake's submit callback) and submit ``records``. Returns
        the jobs refused because the run stops (not announced), and those Dask did not take
        (its client lost the scheduler; announced, then unregistered), with the reasons."""
        refused: list[Refusal] = []
        lost: list[Refusal] = []
        tasks = []
        with self._lock:
            for record in records:
                if self.stop_reason:
                    refused.append((record.info, f"{job_label(record.job)} was not started: "
                                                 f"{self.stop_reason}\n"))  # fmt: skip
                    continue
                self._jobs[record.key] = record
                announce(record.info)
                tasks.append((record.spec, record.request))
            if tasks:
                try:
                    submit(tasks)
                except SubmitFailed as e:
                    lost = self._lost(e)
        return refused, lost

    def _lost(self, failed: SubmitFailed) -> list[Refusal]:
        reason = (
            f"could not be handed to the Dask scheduler ({failed}); the scheduler has "
            f"probably stopped: see its log in {self.logs}"
        )
        lost = []
        for key in failed.keys:
            record = self._jobs.pop(key, None)
            if record is not None:
                lost.append((record.info, f"{job_label(record.job)} {reason}\n"))
        return lost

    def claim_for_rerun(self, key: str) -> JobRecord | None:
        """Take ``key`` out of the registry to run its job again (its outputs are removed
        next, so nothing else may report it meanwhile: a late success of its lost copy then
        finds it gone). None when the run stops or the job was reported or forgotten."""
        with self._lock:
            if self.stop_reason:
                return None
            return self._jobs.pop(key, None)

    def resubmit(
        self,
        record: JobRecord,
        spec: TaskSpec,
        submit: Callable[[list[tuple[TaskSpec, dict[str, float]]]], None],
        moved: bool = False,
    ) -> Replaced:
        """Register a claimed job (:meth:`claim_for_rerun`) again as ``spec`` (its next
        run, :meth:`JobRecord.next_run`, or with ``moved`` the same run elsewhere,
        :meth:`JobRecord.moved`) and submit it. Not when the run began to stop meanwhile:
        the caller then fails it (nobody else knows of it)."""
        with self._lock:
            if self.stop_reason:
                return NotRerun(self.stop_reason)
            record.previous_key = record.spec.key
            record.spec = spec
            if moved:
                record.moves += 1
            else:
                record.reruns += 1
            self._jobs[spec.key] = record
            try:
                submit([(spec, record.request)])
            except SubmitFailed as e:
                return NotTaken(self._lost(e))
        return HandedOver()

    def begin_stop(self, reason: str) -> list[str]:
        """Refuse new jobs from now on; the keys of every job registered until now."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            return list(self._jobs)

    def begin_fatal(self, reason: str) -> bool:
        """The cluster broke: stop, once. False if it already did."""
        with self._lock:
            if self.fatal:
                return False
            self.fatal = reason
            self.stop_reason = self.stop_reason or reason
            return True

    def take_all(self, reason: str, quiet: bool = False) -> dict[str, JobRecord]:
        """Forget every registered job (they are about to be failed or cancelled); with
        ``quiet`` their failures print nothing more (one message said it all)."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            jobs, self._jobs = self._jobs, {}
            self._taken.update(jobs)
            if quiet:
                self._quiet.update(jobs)
        return jobs


def counts_by_rule(jobs: Sequence[Any]) -> str:
    """``rule a (3), rule b (97)``: the jobs' rules and how many of each, for one message."""
    rules = sorted(job_label(job).split(" (")[0] for job in jobs)
    return ", ".join(f"{r} ({rules.count(r)})" for r in dict.fromkeys(rules))

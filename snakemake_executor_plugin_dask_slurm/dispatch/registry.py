"""The jobs handed to Dask and not yet reported back to Snakemake, and whether the run is
stopping: the one place a job is registered, handed over, stopped or forgotten.

Every change happens under one lock, so that a stop's snapshot of the registered jobs can
never miss a job being handed over at that moment (Snakemake's scheduling thread submits
while a SIGTERM watcher, the status thread or the recovery thread stop or fail jobs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from ..report.messages import job_label
from ..worker.wire import TaskSpec
from .dispatcher import SubmitFailed

#: A job ready to hand over: Snakemake's record of it, its task, its Dask request.
Entry = tuple[SubmittedJobInfo, TaskSpec, dict[str, float]]
#: A job that did not reach Dask, with the sentence saying why.
Refusal = tuple[SubmittedJobInfo, str]


@dataclass
class JobRegistry:
    """Registered jobs by task key; the reason the run stops, once it does."""

    #: Where the Dask processes' logs are, for the message when Dask refuses jobs.
    logs: str = ""

    def __post_init__(self) -> None:
        self._jobs: dict[str, SubmittedJobInfo] = {}
        self._lock = threading.Lock()
        self.stop_reason: str | None = None
        #: Set when the cluster broke: every job still registered then fails at once,
        #: with one message for all (see the executor's fail_run).
        self.fatal: str | None = None
        self._quiet: set[str] = set()

    def get(self, key: str) -> SubmittedJobInfo | None:
        return self._jobs.get(key)

    def pop(self, key: str) -> SubmittedJobInfo | None:
        with self._lock:
            return self._jobs.pop(key, None)

    def __len__(self) -> int:
        return len(self._jobs)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def quiet(self, keys: Sequence[str]) -> None:
        """These jobs' failures print nothing: one message explained them all."""
        with self._lock:
            self._quiet.update(keys)

    def is_quiet(self, key: str | None) -> bool:
        """Whether this job's failure was already explained with the whole run's."""
        return key in self._quiet

    def hand_over(
        self,
        entries: Sequence[Entry],
        announce: Callable[[SubmittedJobInfo], None],
        submit: Callable[[list[tuple[TaskSpec, dict[str, float]]]], None],
    ) -> tuple[list[Refusal], list[Refusal]]:
        """Register, announce (Snakemake's submit callback) and submit ``entries``. Returns
        the jobs refused because the run stops (not announced), and those Dask did not take
        (its client lost the scheduler; announced, then unregistered), with the reasons."""
        refused: list[Refusal] = []
        lost: list[Refusal] = []
        tasks = []
        with self._lock:
            for info, spec, request in entries:
                if self.stop_reason:
                    refused.append((info, f"{job_label(info.job)} was not started: "
                                          f"{self.stop_reason}\n"))  # fmt: skip
                    continue
                self._jobs[spec.key] = info
                announce(info)
                tasks.append((spec, request))
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
            info = self._jobs.pop(key, None)
            if info is not None:
                lost.append((info, f"{job_label(info.job)} {reason}\n"))
        return lost

    def replace(
        self,
        old_key: str,
        info: SubmittedJobInfo,
        spec: TaskSpec,
        request: dict[str, float],
        submit: Callable[[list[tuple[TaskSpec, dict[str, float]]]], None],
    ) -> list[Refusal] | str | None:
        """Run a registered job again under ``spec.key``: None when handed over, the
        stop reason when the run stops ("" when the job was forgotten meanwhile), or
        the refusals when Dask did not take it."""
        with self._lock:
            if self.stop_reason or self._jobs.pop(old_key, None) is None:
                return self.stop_reason or ""
            self._jobs[spec.key] = info
            try:
                submit([(spec, request)])
            except SubmitFailed as e:
                return self._lost(e)
        return None

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

    def take_all(self, reason: str, quiet: bool = False) -> dict[str, SubmittedJobInfo]:
        """Forget every registered job (they are about to be failed or cancelled); with
        ``quiet`` their failures print nothing more (one message said it all)."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            jobs, self._jobs = self._jobs, {}
            if quiet:
                self._quiet.update(jobs)
        return jobs


def counts_by_rule(jobs: Sequence[Any]) -> str:
    """``rule a (3), rule b (97)``: the jobs' rules and how many of each, for one message."""
    rules = sorted(job_label(job).split(" (")[0] for job in jobs)
    return ", ".join(f"{r} ({rules.count(r)})" for r in dict.fromkeys(rules))

"""Snakemake's list of remaining jobs, made only when a job selector reads it.

Every scheduling round, Snakemake 9.27.1's ``JobScheduler.job_selector``
(snakemake/scheduling/job_scheduler.py) hands the selector
``self.remaining_jobs``: a list of every job of the DAG still to run, built by walking
all of them. Rounds come with completions, so a run of N jobs builds it about N/5 times
over up to N jobs: quadratic (3.4 s at 10,000 thin jobs with ``--jobs 100``, about
5 minutes extrapolated to 100,000). Snakemake's greedy selector, which the plugin runs
with, never reads it; its ILP selector reads it at once, inside the same call.

Here ``remaining_jobs`` returns a sequence that makes Snakemake's own list, with
Snakemake's own function, the first time anything reads it, and keeps it. The selectors
get it inside ``run_selector`` under the scheduler's lock, where nothing changes the
jobs' state, so what they read is what the list would have held; the scheduler-plugin
interface declares the argument a ``Sequence``, which this is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from .fingerprint import mark

#: JobScheduler.remaining_jobs, JobScheduler.job_selector and JobScheduler.schedule (every
#: use of it in Snakemake's scheduler), and the ILP selector (its one reader), of 9.27.1.
FINGERPRINT = "64f3c5332bfd59550f6d36c937324f697badb1374ba6af64b4efc14bf7a94b71"
WRITTEN_FOR = "9.27.1"
WHAT = "JobScheduler.remaining_jobs and its readers (snakemake/scheduling/)"
WITHOUT = (
    "every scheduling round walks every job still to run, whichever job selector runs "
    "(time in N² over a run of N jobs)"
)


def targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake.scheduling.milp import Scheduler as IlpScheduler

    return [
        JobScheduler.remaining_jobs.fget,
        JobScheduler.job_selector,
        JobScheduler.schedule,
        IlpScheduler.select_jobs,
    ]


class RemainingJobs(Sequence[Any]):
    """A list made by ``make`` when first read."""

    __slots__ = ("_jobs", "_make")

    def __init__(self, make: Callable[[], list[Any]]) -> None:
        self._make: Callable[[], list[Any]] | None = make
        self._jobs: list[Any] = []

    @property
    def jobs(self) -> list[Any]:
        if self._make is not None:
            self._jobs, self._make = self._make(), None
        return self._jobs

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.jobs[index]

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.jobs)

    def __contains__(self, job: object) -> bool:
        return job in self.jobs

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def __eq__(self, other: object) -> bool:
        return self.jobs == (other.jobs if isinstance(other, RemainingJobs) else other)

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return repr(self.jobs) if self._make is None else "RemainingJobs(<not read yet>)"


def replacement(remaining_jobs: property) -> property:
    make = remaining_jobs.fget
    assert make is not None

    @functools.wraps(make)
    def lazily(self: Any) -> RemainingJobs:
        return RemainingJobs(functools.partial(make, self))

    return property(mark(lazily, make), doc=remaining_jobs.__doc__)


def apply() -> None:
    from snakemake.scheduling.job_scheduler import JobScheduler

    JobScheduler.remaining_jobs = replacement(JobScheduler.remaining_jobs)

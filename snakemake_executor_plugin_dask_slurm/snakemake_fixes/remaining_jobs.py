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

from .fingerprint import digest_texts, lines_naming, mark, nested_block, source_of

#: What the fix relies on, of 9.27.1 (:func:`relied_on`): the property itself, the block that
#: hands it to the job selectors under the scheduler's lock, and every other line of the
#: scheduler and of the ILP selector (its one reader) that uses it.
FINGERPRINT = "7732107b3782c4c22428f4ad690d08af17de574acd761df0bd93a9dd734facf9"
WRITTEN_FOR = "9.27.1"
WHAT = "JobScheduler.remaining_jobs and its uses (snakemake/scheduling/job_scheduler.py, milp.py)"
WITHOUT = (
    "every scheduling round walks every job still to run, whichever job selector runs "
    "(time in N² over a run of N jobs)"
)
#: The nested function of ``JobScheduler.job_selector`` that calls the selectors.
RUN_SELECTOR = "def run_selector(job_selector) -> Sequence[AbstractJob]:"


def targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake.scheduling.milp import Scheduler as IlpScheduler

    return [
        JobScheduler.remaining_jobs.fget,
        JobScheduler.job_selector,
        JobScheduler.schedule,
        IlpScheduler.select_jobs,
    ]


def relied_on(remaining: str, job_selector: str, schedule: str, ilp: str) -> list[str]:
    """From the sources of :func:`targets`, what the fix depends on: all of the property
    (it wraps it), ``run_selector`` whole (the selectors read it there, under the lock,
    where no job's state changes), and the lines that name ``remaining_jobs`` elsewhere
    (truthiness and iteration in ``schedule``'s error path, iteration in the ILP). An
    edit anywhere else in those functions (``schedule``'s logging churns between
    releases) leaves the fix installed; a new use of the list switches it off."""
    block = nested_block(job_selector, RUN_SELECTOR)
    if not block:
        return []
    outside = [line for line in lines_naming(job_selector, NAME) if line not in block]
    return [
        remaining,
        *block,
        *outside,
        *lines_naming(schedule, NAME),
        *lines_naming(ilp, NAME),
    ]


NAME = "remaining_jobs"


def found() -> str | None:
    """The narrowed fingerprint of the running Snakemake (None: unreadable or not there)."""
    try:
        texts = relied_on(*(source_of(f) for f in targets()))
    except (OSError, TypeError):
        return None
    return digest_texts(texts) if texts else None


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

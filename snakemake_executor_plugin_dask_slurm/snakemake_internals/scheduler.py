"""Snakemake's job scheduler (snakemake/scheduling/job_scheduler.py, milp.py): two fixes and
the settings the plugin chooses for it.

**remaining_jobs** — Snakemake's list of remaining jobs, made only when a job selector
reads it. Every scheduling round, Snakemake 9.27.1's ``JobScheduler.job_selector`` hands
the selector ``self.remaining_jobs``: a list of every job of the DAG still to run, built
by walking all of them. Rounds come with completions, so a run of N jobs builds it about
N/5 times over up to N jobs: quadratic (3.4 s at 10,000 thin jobs with ``--jobs 100``,
about 5 minutes extrapolated to 100,000). Snakemake's greedy selector, which the plugin
runs with, never reads it; its ILP selector reads it at once, inside the same call. Here
``remaining_jobs`` returns a sequence that makes Snakemake's own list, with Snakemake's
own function, the first time anything reads it, and keeps it. The selectors get it inside
``run_selector`` under the scheduler's lock, where nothing changes the jobs' state, so
what they read is what the list would have held; the scheduler-plugin interface declares
the argument a ``Sequence``, which this is.

**first_round** — a call into the plugin before Snakemake's first scheduling round.
Snakemake 9.27.1 builds the executor inside ``JobScheduler.__init__``, after the job
scheduler has read the subsample and the job-rate limit and before it sets its job
selector; the scheduler becomes ``workflow.scheduler`` when ``__init__`` returns, and
``Workflow.execute`` then calls ``JobScheduler.schedule()``, whose first round selects
jobs before the executor hears from it again (its first ``run_jobs``). Settings the
plugin chooses for the job scheduler (dispatch/scheduling.py) therefore came one round
late: with plain flags at 100,000 rules, that round ran Snakemake's ILP over every ready
job (24.9 s). Here ``JobScheduler.schedule`` first calls what the executor registered for
its workflow (:func:`before_first_round`), once, then runs as Snakemake's own. Other
workflows in the same process (Snakemake's API can run several) are not touched.

**The settings** (:func:`tune`): the job-rate limiter, the subsample and the greedy
selector set on a ``JobScheduler``, under its lock (a read of its private attributes).
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from . import rounds
from .guard import Touch, digest_texts, lines_naming, mark, nested_block, present, source_of

#: The nested function of ``JobScheduler.job_selector`` that calls the selectors.
RUN_SELECTOR = "def run_selector(job_selector) -> Sequence[AbstractJob]:"


def remaining_jobs_targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake.scheduling.milp import Scheduler as IlpScheduler

    return [
        JobScheduler.remaining_jobs.fget,
        JobScheduler.job_selector,
        JobScheduler.schedule,
        IlpScheduler.select_jobs,
    ]


def remaining_jobs_relied_on(
    remaining: str, job_selector: str, schedule: str, ilp: str
) -> list[str]:
    """From the sources of :func:`remaining_jobs_targets`, what the fix depends on: all of
    the property (it wraps it), ``run_selector`` whole (the selectors read it there, under the lock,
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


def remaining_jobs_found() -> str | None:
    """The narrowed fingerprint of the running Snakemake (None: unreadable or not there)."""
    try:
        texts = remaining_jobs_relied_on(*(source_of(f) for f in remaining_jobs_targets()))
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


def remaining_jobs_replacement(remaining_jobs: property) -> property:
    make = remaining_jobs.fget
    assert make is not None

    @functools.wraps(make)
    def lazily(self: Any) -> RemainingJobs:
        return RemainingJobs(functools.partial(make, self))

    return property(mark(lazily, make), doc=remaining_jobs.__doc__)


def apply_remaining_jobs() -> None:
    from snakemake.scheduling.job_scheduler import JobScheduler

    JobScheduler.remaining_jobs = remaining_jobs_replacement(JobScheduler.remaining_jobs)


_lock = threading.Lock()
#: (the workflow, what to call with its job scheduler before its first round), both weak:
#: a run with nothing to do never schedules, and must not be kept alive by its entry.
_waiting: list[tuple[weakref.ref[Any], Callable[[], Callable[[Any], None] | None]]] = []
_installed = False


def first_round_targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.job_scheduler import JobScheduler

    return [JobScheduler.schedule]


#: What the plugin's scheduling settings change (:func:`tune`): the hook is for
#: them to be in place before ``schedule`` first reads them.
TUNED = ("job_selector", "job_rate_limiter", "subsample", "_job_count", "_lock")


def first_round_relied_on(schedule: str) -> list[str]:
    """Of ``schedule``'s source: its signature (the hook calls it as it is) and every line
    that reads what the plugin tunes; the rest of it (its logging churns between releases)
    does not matter to the hook."""
    lines = schedule.splitlines()
    return [lines[0].strip(), *(line for name in TUNED for line in lines_naming(schedule, name))]


def first_round_found() -> str | None:
    """The narrowed fingerprint of the running Snakemake (None: unreadable)."""
    try:
        return digest_texts(first_round_relied_on(source_of(first_round_targets()[0])))
    except (OSError, TypeError):
        return None


def before_first_round(workflow: Any, call: Callable[[Any], None]) -> bool:
    """Call ``call(job_scheduler)`` when ``workflow``'s job scheduler starts scheduling,
    before it selects any job. False, and nothing registered, if the hook is not
    installed (a Snakemake this was not written for)."""
    try:
        weak_call: Callable[[], Callable[[Any], None] | None] = weakref.WeakMethod(call)
    except TypeError:  # not a bound method
        weak_call = lambda: call  # noqa: E731
    with _lock:
        if not _installed:
            return False
        _waiting.append((weakref.ref(workflow), weak_call))
    return True


def _take(workflow: Any) -> list[Callable[[Any], None]]:
    with _lock:
        mine = [c for ref, call in _waiting if ref() is workflow and (c := call()) is not None]
        _waiting[:] = [
            (ref, call)
            for ref, call in _waiting
            if ref() is not None and ref() is not workflow and call() is not None
        ]
    return mine


def first_round_replacement(schedule: Any) -> Any:
    @functools.wraps(schedule)
    def schedule_after_calls(self: Any) -> Any:
        for call in _take(self.workflow):
            call(self)
        return schedule(self)

    return mark(schedule_after_calls, schedule)


def apply_first_round() -> None:
    global _installed
    from snakemake.scheduling.job_scheduler import JobScheduler

    JobScheduler.schedule = first_round_replacement(JobScheduler.schedule)
    with _lock:
        _installed = True


def tune(scheduler: Any, lift_rate_limit: bool, subsample: int | None, greedy: bool) -> None:
    """Set the plugin's scheduling choices (dispatch/scheduling.py's plan) on Snakemake's
    ``JobScheduler``: no job-rate limiter, ``subsample``, the greedy selector; and its
    rounds coalesced where that fix is installed (:mod:`.rounds`)."""
    with scheduler._lock:
        if rounds.installed():
            rounds.coalesce(scheduler)
        if lift_rate_limit:
            scheduler.job_rate_limiter = None
            scheduler.resources["_job_count"] = sys.maxsize  # what it asserts without one
        if subsample:
            scheduler.subsample = subsample
        if greedy:
            scheduler._job_selector = scheduler.job_selector_greedy


def progress(workflow: Any) -> tuple[int | None, int | None]:
    """Snakemake's own "N of M steps done": its scheduler's ``finished_jobs`` (a group's
    members each counted, local and no-op jobs too) and its DAG's length; None for what
    is not there, or on a Snakemake whose code is not the one this reads (:data:`PROGRESS`;
    read on the status thread, once a round: plain integers)."""
    if not progress_readable():
        return None, None
    done = getattr(getattr(workflow, "scheduler", None), "finished_jobs", None)
    dag = getattr(workflow, "dag", None)
    try:
        total = len(dag) if dag is not None else None
    except TypeError:
        total = None
    return (done if isinstance(done, int) else None), total


def tuned_names() -> str:
    """What :func:`tune` finds on Snakemake's ``JobScheduler`` (:func:`.guard.present`)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    init = source_of(JobScheduler.__init__)
    return present(
        [
            ("_lock", "self._lock" in init),
            ("job_rate_limiter", "self.job_rate_limiter" in init),
            ("resources['_job_count']", "_job_count" in init),
            ("subsample", "self.subsample" in init),
            ("_job_selector", "self._job_selector" in init),
            ("job_selector_greedy", "self.job_selector_greedy" in init),
        ]
    )


REMAINING_JOBS = Touch(
    name="remaining_jobs",
    kind="fix",
    what=(
        "JobScheduler.remaining_jobs and its uses (snakemake/scheduling/job_scheduler.py, milp.py)"
    ),
    written_for="9.27.1",
    without=(
        "every scheduling round walks every job still to run, whichever job selector runs "
        "(time in N² over a run of N jobs)"
    ),
    found=remaining_jobs_found,
    #: the property, ``run_selector`` whole, and every other line that names it
    #: (:func:`remaining_jobs_relied_on`)
    fingerprint="7732107b3782c4c22428f4ad690d08af17de574acd761df0bd93a9dd734facf9",
    apply=apply_remaining_jobs,
)
FIRST_ROUND = Touch(
    name="first_round",
    kind="fix",
    what="JobScheduler.schedule (snakemake/scheduling/job_scheduler.py)",
    written_for="9.27.1",
    without=(
        "the plugin's scheduling settings apply from the second scheduling round (the first "
        "runs with Snakemake's defaults, e.g. its ILP over every ready job)"
    ),
    found=first_round_found,
    #: ``schedule``'s signature and its lines that read what the plugin tunes
    #: (:func:`first_round_relied_on`)
    fingerprint="7f67c051a67fb763fe9f0c1580257a59c1f92db011a84202140abf6084e0d8fd",
    apply=apply_first_round,
)
SETTINGS = Touch(
    name="scheduling settings",
    kind="read",
    what="JobScheduler's job-rate limiter, subsample and job selector (job_scheduler.py)",
    written_for="9.27.1",
    without="the plugin cannot lift Snakemake's job-rate limit or choose its job selector",
    found=tuned_names,
    fingerprint=(
        "_lock,job_rate_limiter,resources['_job_count'],subsample,_job_selector,job_selector_greedy"
    ),
)


def progress_names() -> str:
    """What :func:`progress` reads (:func:`.guard.present`)."""
    import snakemake.api  # noqa: F401  (snakemake.dag alone is a circular import)
    from snakemake.dag import DAG
    from snakemake.scheduling.job_scheduler import JobScheduler

    init = source_of(JobScheduler.__init__)
    return present(
        [
            ("finished_jobs", "self.finished_jobs = 0" in init),
            ("DAG.__len__", "__len__" in vars(DAG)),
        ]
    )


PROGRESS = Touch(
    name="progress figures",
    kind="read",
    what="JobScheduler.finished_jobs and len(DAG) (Snakemake's 'N of M steps done')",
    written_for="9.27.1",
    without="the progress line and status file show no 'N of M jobs done'",
    found=progress_names,
    fingerprint="finished_jobs,DAG.__len__",
)


@functools.cache
def progress_readable() -> bool:
    """Whether :data:`PROGRESS` matches the running Snakemake (checked once)."""
    return PROGRESS.matches()


TOUCHES = (REMAINING_JOBS, FIRST_ROUND, SETTINGS, PROGRESS)

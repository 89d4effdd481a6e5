"""A call into the plugin before Snakemake's first scheduling round.

Snakemake 9.27.1 builds the executor inside ``JobScheduler.__init__``, after the job
scheduler has read the subsample and the job-rate limit and before it sets its job
selector; the scheduler becomes ``workflow.scheduler`` when ``__init__`` returns, and
``Workflow.execute`` then calls ``JobScheduler.schedule()``, whose first round selects
jobs before the executor hears from it again (its first ``run_jobs``). Settings the
plugin chooses for the job scheduler (dispatch/scheduling.py) therefore came one round
late: with plain flags at 100,000 rules, that round ran Snakemake's ILP over every ready
job (24.9 s).

Here ``JobScheduler.schedule`` first calls what the executor registered for its workflow
(:func:`before_first_round`), once, then runs as Snakemake's own. Other workflows in the
same process (Snakemake's API can run several) are not touched.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .fingerprint import digest_texts, lines_naming, mark, source_of

#: What the hook relies on in JobScheduler.schedule of 9.27.1 (:func:`relied_on`).
FINGERPRINT = "7f67c051a67fb763fe9f0c1580257a59c1f92db011a84202140abf6084e0d8fd"
WRITTEN_FOR = "9.27.1"
WHAT = "JobScheduler.schedule (snakemake/scheduling/job_scheduler.py)"
WITHOUT = (
    "the plugin's scheduling settings apply from the second scheduling round (the first "
    "runs with Snakemake's defaults, e.g. its ILP over every ready job)"
)

_lock = threading.Lock()
#: (the workflow, what to call with its job scheduler before its first round), both weak:
#: a run with nothing to do never schedules, and must not be kept alive by its entry.
_waiting: list[tuple[weakref.ref[Any], Callable[[], Callable[[Any], None] | None]]] = []
_installed = False


def targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.job_scheduler import JobScheduler

    return [JobScheduler.schedule]


#: What the plugin's scheduling settings change (dispatch/scheduling.py): the hook is for
#: them to be in place before ``schedule`` first reads them.
TUNED = ("job_selector", "job_rate_limiter", "subsample", "_job_count", "_lock")


def relied_on(schedule: str) -> list[str]:
    """Of ``schedule``'s source: its signature (the hook calls it as it is) and every line
    that reads what the plugin tunes; the rest of it (its logging churns between releases)
    does not matter to the hook."""
    lines = schedule.splitlines()
    return [lines[0].strip(), *(line for name in TUNED for line in lines_naming(schedule, name))]


def found() -> str | None:
    """The narrowed fingerprint of the running Snakemake (None: unreadable)."""
    try:
        return digest_texts(relied_on(source_of(targets()[0])))
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


def replacement(schedule: Any) -> Any:
    @functools.wraps(schedule)
    def schedule_after_calls(self: Any) -> Any:
        for call in _take(self.workflow):
            call(self)
        return schedule(self)

    return mark(schedule_after_calls, schedule)


def apply() -> None:
    global _installed
    from snakemake.scheduling.job_scheduler import JobScheduler

    JobScheduler.schedule = replacement(JobScheduler.schedule)
    with _lock:
        _installed = True

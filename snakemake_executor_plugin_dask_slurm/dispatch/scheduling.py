"""Snakemake's own scheduling settings for a Dask task farm: which defaults to lift.

Snakemake applies three defaults to every executor that suit one batch job per rule but
cost a Dask pool more than half its speed on thousands of short jobs (docs/benchmarks.md):

- ``--max-jobs-per-timespan 100/1s``: a job-rate limiter that protects batch schedulers
  from submission storms. A Dask pool needs none, and 1,000 jobs then take at least 10 s.
- ``--scheduler ilp``: an integer program solved per scheduling round.
- no ``--scheduler-subsample``: the greedy selection is quadratic in the ready jobs.

When the user chose none of them, the plugin lifts what they left at Snakemake's default
(:func:`plan`, pure); a choice the user made always wins. :func:`tune_job_scheduler` applies
the plan to Snakemake's job scheduler before its first scheduling round (Snakemake
internals; the hook is snakemake_internals/scheduler.py); the interface change that would
make this a supported setting is proposed in docs/further.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..snakemake_internals.scheduler import tune

#: Snakemake's command-line default rate limit: (jobs, seconds).
DEFAULT_RATE = (100, 1.0)
#: Scheduling settings that suit a task farm.
FARM_SUBSAMPLE = 500
RATE_FLAGS = ("--max-jobs-per-timespan", "--max-jobs-per-second")
SCHEDULER_FLAGS = ("--scheduler",)
SUBSAMPLE_FLAGS = ("--scheduler-subsample",)


@dataclass(frozen=True)
class Given:
    """Snakemake's scheduling settings for this run, and whether the user set each."""

    rate: tuple[int, float] | None  # (jobs, seconds); None: no limiter
    scheduler: str
    subsample: int | None
    rate_chosen: bool = False
    scheduler_chosen: bool = False
    subsample_chosen: bool = False


@dataclass(frozen=True)
class Plan:
    """What to change; None/False: leave it as it is."""

    lift_rate_limit: bool = False
    scheduler: str | None = None
    subsample: int | None = None

    def __bool__(self) -> bool:
        return self.lift_rate_limit or self.scheduler is not None or self.subsample is not None

    def effective(self, given: Given) -> Given:
        """The settings Snakemake runs with once this plan is applied."""
        return Given(
            rate=None if self.lift_rate_limit else given.rate,
            scheduler=self.scheduler or given.scheduler,
            subsample=self.subsample or given.subsample,
        )

    def describe(self, given: Given) -> str:
        """One line for the start-up log: what changed and why."""
        done = []
        if self.lift_rate_limit and given.rate:
            done.append(
                f"no job-rate limit (Snakemake's default {given.rate[0]} jobs per "
                f"{given.rate[1]:g} s protects batch schedulers; a Dask pool needs none)"
            )
        if self.scheduler:
            done.append(f"{self.scheduler} job selection instead of {given.scheduler}")
        if self.subsample:
            done.append(f"--scheduler-subsample {self.subsample}")
        return (
            f"scheduling for many short jobs: {', '.join(done)}. Give any of these settings "
            "yourself to keep yours"
        )


def flag_given(argv: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether the command line sets one of ``flags`` (``--flag v``, ``--flag=v``, or an
    abbreviation argparse would accept)."""
    for arg in argv:
        if arg == "--":  # the rest are targets
            return False
        name = arg.split("=", 1)[0]
        if len(name) > 3 and name.startswith("--") and any(f.startswith(name) for f in flags):
            return True
    return False


def plan(given: Given) -> Plan:
    """Lift each setting the user left at Snakemake's default. A setting is taken as the
    user's when it is on the command line or differs from that default (a profile or the
    API set it); a profile that sets exactly the default cannot be told from it."""
    lift = not given.rate_chosen and given.rate == DEFAULT_RATE
    scheduler = "greedy" if not given.scheduler_chosen and given.scheduler == "ilp" else None
    subsample = FARM_SUBSAMPLE if not given.subsample_chosen and given.subsample is None else None
    return Plan(lift, scheduler, subsample)


def tune_job_scheduler(
    workflow: Any, argv: Sequence[str], scheduler: Any = None
) -> tuple[Given, str | None]:
    """Before the first scheduling round (or, on a Snakemake where the plugin cannot hook
    that, at its first ``run_jobs``): apply :func:`plan` to Snakemake's job scheduler
    (``scheduler``, else ``workflow.scheduler``); the settings it now runs with, and the
    line saying what changed (None if nothing did)."""
    settings = workflow.scheduling_settings
    rate = settings.max_jobs_per_timespan
    given = Given(
        rate=(rate.max_jobs, float(rate.timespan)) if rate else None,
        scheduler=settings.scheduler,
        subsample=settings.subsample,
        rate_chosen=flag_given(argv, RATE_FLAGS) or bool(settings.max_jobs_per_second),
        scheduler_chosen=flag_given(argv, SCHEDULER_FLAGS),
        subsample_chosen=flag_given(argv, SUBSAMPLE_FLAGS),
    )
    change = plan(given)
    if scheduler is None:
        scheduler = getattr(workflow, "scheduler", None)
    if scheduler is None:
        return given, None
    apply_to_job_scheduler(scheduler, change)  # also when nothing changes: the rounds
    return change.effective(given), change.describe(given) if change else None


def apply_to_job_scheduler(scheduler: Any, change: Plan) -> None:
    """Apply ``change`` to Snakemake's ``JobScheduler`` (its internals: the one room's
    :func:`..snakemake_internals.scheduler.tune`, pinned there), whose rounds are
    coalesced whatever the user chose (:mod:`..snakemake_internals.rounds`)."""
    tune(scheduler, change.lift_rate_limit, change.subsample, change.scheduler == "greedy")


def cap_threads_like_cores(workflow: Any, cpus: int) -> None:
    """Local mode without ``--cores``: scale every job's threads down to ``cpus``, as
    Snakemake's local executor does with ``--cores`` (``Rule.expand_resources`` constrains
    threads by ``workflow.global_resources["_cores"]``). Done before the first job
    selection, which re-evaluates every job's resources."""
    workflow.global_resources["_cores"] = cpus

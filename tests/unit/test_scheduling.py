"""The plugin's choice of Snakemake scheduling settings: a pure function of what the user
gave (table-driven), and the Snakemake internals it relies on, pinned."""

from __future__ import annotations

import inspect

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.scheduling import (
    RATE_FLAGS,
    SCHEDULER_FLAGS,
    SUBSAMPLE_FLAGS,
    Given,
    Plan,
    flag_given,
    plan,
)
from snakemake_executor_plugin_dask_slurm.snakemake_internals.guard import original

DEFAULTS = Given(rate=(100, 1.0), scheduler="ilp", subsample=None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # nothing given: every Snakemake default that slows a farm is lifted
        (DEFAULTS, Plan(lift_rate_limit=True, scheduler="greedy", subsample=500)),
        # each setting given on the command line wins (even when equal to the default)
        (
            Given((100, 1.0), "ilp", None, rate_chosen=True),
            Plan(lift_rate_limit=False, scheduler="greedy", subsample=500),
        ),
        (
            Given((100, 1.0), "ilp", None, scheduler_chosen=True),
            Plan(lift_rate_limit=True, scheduler=None, subsample=500),
        ),
        (
            Given((100, 1.0), "ilp", None, subsample_chosen=True),
            Plan(lift_rate_limit=True, scheduler="greedy", subsample=None),
        ),
        # set in a profile (or the API) to something else: the user's
        (Given((10, 1.0), "greedy", 50), Plan()),
        (Given((100000, 1.0), "ilp", None), Plan(scheduler="greedy", subsample=500)),
        # the API's default: no limiter at all
        (Given(None, "greedy", None), Plan(subsample=500)),
        # a scheduler plugin the user installed and chose is never replaced
        (Given((100, 1.0), "my-plugin", 20), Plan(lift_rate_limit=True)),
    ],
)
def test_plan(given: Given, expected: Plan) -> None:
    assert plan(given) == expected


@pytest.mark.parametrize(
    ("argv", "flags", "given"),
    [
        (["snakemake", "--jobs", "4"], RATE_FLAGS, False),
        (["snakemake", "--max-jobs-per-timespan", "10/1s"], RATE_FLAGS, True),
        (["snakemake", "--max-jobs-per-timespan=10/1s"], RATE_FLAGS, True),
        (["snakemake", "--max-jobs-per-second", "5"], RATE_FLAGS, True),
        (["snakemake", "--max-jobs-per", "5"], RATE_FLAGS, True),  # argparse abbreviation
        (["snakemake", "--scheduler", "ilp"], SCHEDULER_FLAGS, True),
        (["snakemake", "--scheduler-subsample", "10"], SCHEDULER_FLAGS, False),
        (["snakemake", "--scheduler-subsample", "10"], SUBSAMPLE_FLAGS, True),
        (["snakemake", "--", "--scheduler"], SCHEDULER_FLAGS, False),
    ],
)
def test_flag_given(argv: list[str], flags: tuple[str, ...], given: bool) -> None:
    assert flag_given(argv, flags) is given


def test_the_start_up_line_says_what_changed_and_why() -> None:
    line = plan(DEFAULTS).describe(DEFAULTS)
    assert line.startswith("scheduling for many short jobs: no job-rate limit (Snakemake's ")
    assert "greedy job selection instead of ilp" in line and "--scheduler-subsample 500" in line


def test_snakemake_job_scheduler_internals_the_plugin_relies_on() -> None:
    """executor.apply_to_job_scheduler sets these on Snakemake's JobScheduler. If a
    Snakemake release renames or re-reads them elsewhere, this fails: plain flags would
    silently be slow again (issue 11)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    init = inspect.getsource(JobScheduler.__init__)
    for assignment in (
        "self.subsample = ",
        "self.job_rate_limiter = (",
        "self.job_selector_greedy = ",
        "self._job_selector = ",
        "self._lock = threading.Lock()",
        'self.global_resources["_job_count"] = sys.maxsize',
    ):
        assert assignment in init, f"JobScheduler.__init__ no longer has {assignment!r}"
    selector = inspect.getsource(JobScheduler.job_selector)
    assert "if self.job_rate_limiter is None:" in selector
    assert 'self.resources["_job_count"] == sys.maxsize' in selector
    assert "run_selector(self._job_selector)" in selector
    schedule = inspect.getsource(original(JobScheduler.schedule))
    assert "if self.subsample and n_total_needrun > self.subsample:" in schedule
    assert "self.job_rate_limiter is not None" in schedule
    assert schedule.index("self.subsample") < schedule.index("run = self.job_selector(needrun)")


def test_the_plugin_is_called_before_snakemakes_first_round() -> None:
    """The plugin registers its scheduling settings in the executor's __post_init__ and
    applies them when JobScheduler.schedule() starts (snakemake_internals/scheduler.py):
    Snakemake builds the executor inside JobScheduler.__init__, and Workflow.execute calls
    schedule() on the finished scheduler, whose first round is the first job selection."""
    import snakemake.api  # noqa: F401  (imports snakemake.workflow in the order it needs)
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake.workflow import Workflow

    init = inspect.getsource(JobScheduler.__init__)
    assert init.index("self.subsample = ") < init.index(
        "self._executor = executor_plugin.executor("
    )
    assert init.index("self._executor = executor_plugin.executor(") < init.index(
        "self._job_selector = scheduler.select_jobs"
    )
    execute = inspect.getsource(Workflow.execute)
    assert execute.index("self.scheduler = JobScheduler(") < execute.index(
        "success = self.scheduler.schedule()"
    )
    assert "self.job_selector(" not in inspect.getsource(JobScheduler.__init__)

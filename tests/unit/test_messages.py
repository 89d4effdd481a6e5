from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, finished_from_event
from snakemake_executor_plugin_dask_slurm.report.messages import (
    failure_message,
    job_label,
    lost_job_message,
    unconfirmed_verdict,
)
from snakemake_executor_plugin_dask_slurm.worker.proctree import describe_exit
from snakemake_executor_plugin_dask_slurm.worker.task import TaskOutcome, _outcome_wire
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why
from tests.fakes import FakeGroupJob, FakeJob

JOB = FakeJob(name="align", jobid=7, attempt=2)
GROUP = FakeGroupJob(name="grp", rules=["b", "a", "b"])


def test_job_label() -> None:
    assert job_label(JOB) == "rule align (jobid 7, attempt 2)"
    assert job_label(GROUP) == "group job grp (a, b)"


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (1, "exited with code 1"),
        (127, "exited with code 127 (command not found)"),
        (126, "exited with code 126 (the command was found but could not be executed"),
        (-9, "was killed by signal SIGKILL"),
        (-15, "was killed by signal SIGTERM"),
        (-100, "was killed by signal 100"),  # a number Python has no name for
    ],
)
def test_describe_exit(code: int, text: str) -> None:
    assert describe_exit(code).startswith(text)


def test_failure_message_has_rule_code_host_tail_and_log() -> None:
    outcome = TaskOutcome(3, "n2", 10.0, 12.5, "line a\nline b")
    msg = failure_message(JOB, outcome, None, "direct", "/abs/x.log")
    assert msg.startswith("rule align (jobid 7, attempt 2) exited with code 3 on n2 after 2.5 s")
    assert "Last lines of its output:\n  | line a\n  | line b\n" in msg
    assert msg.endswith("\n    Full log: /abs/x.log\n")


def test_failure_message_for_start_errors_and_lost_tasks() -> None:
    outcome = TaskOutcome(-1, "n1", 0, 0, "", "FileNotFoundError: bash")
    msg = failure_message(JOB, outcome, None, "direct", "/l")
    assert "could not be started on n1: FileNotFoundError: bash" in msg
    lost = failure_message(JOB, None, "the worker died", "general", "/l")
    assert lost.startswith("rule align (jobid 7, attempt 2) did not finish: the worker died.")


def test_finished_from_event() -> None:
    outcome = TaskOutcome(3, "n2", 1.0, 2.0, "tail")
    event = {"key": "k", "ok": False, "outcome": _outcome_wire(outcome)}  # as the worker does
    assert finished_from_event({"key": "k", "ok": True}) == Finished("k", True)
    assert finished_from_event(event) == Finished("k", False, outcome=outcome)
    assert finished_from_event({"key": "k", "ok": False, "problem": "ValueError: x"}) == Finished(
        "k", False, problem="ValueError: x"
    )
    assert finished_from_event({"nokey": 1}) is None


def test_a_cold_job_says_why_in_its_event_as_the_worker_sends_it() -> None:
    cold = Cold(Why.DEPLOYMENT, "conda:")
    ok = {"key": "k", "ok": True, "cold": cold.to_wire()}
    assert finished_from_event(ok) == Finished("k", True, cold=cold)
    outcome = TaskOutcome(3, "n2", 1.0, 2.0, "tail", cold=cold)
    # as the worker sends it (worker/task.py): the outcome's plain values, the cold beside
    failed = {"key": "k", "ok": False, "outcome": _outcome_wire(outcome), "cold": ["x", ""]}
    assert "cold" not in failed["outcome"]
    assert finished_from_event({**failed, "cold": cold.to_wire()}) == Finished(
        "k", False, outcome=outcome, cold=cold
    )
    unknown = finished_from_event(failed)  # a reason this side does not know: not counted
    assert unknown is not None and unknown.cold is None and unknown.outcome is not None
    assert unknown.outcome.cold is None


def test_lost_job_messages_tell_running_from_waiting() -> None:
    ran = lost_job_message("rule a (jobid 1, attempt 1)", "n2", True, None, "Again.")
    assert ran == "rule a (jobid 1, attempt 1) was running on n2 when that worker died. Again.\n"
    how = "it was killed by signal SIGKILL, and its supervisor ended 2 process(es)"
    waited = lost_job_message("rule a (jobid 1, attempt 1)", "n2", False, how, "Again.")
    assert waited.startswith("rule a (jobid 1, attempt 1) was waiting, not started, on n2 when")
    assert how in waited
    assert "DASK_SLURM_JOB=k-1" in unconfirmed_verdict("n2", "k-1")


@pytest.mark.parametrize(
    ("scheduler", "jobs", "rate", "cpus", "names"),
    [
        ("greedy", None, 100000.0, 16, None),
        ("greedy", 64, 100000.0, 16, None),
        ("ilp", None, 100000.0, 16, "the ILP job scheduler"),
        ("greedy", 8, 100000.0, 16, "--jobs 8 for 16 worker CPUs"),
        ("greedy", None, 100.0, 16, "at most 100 job submissions per second"),
    ],
)
def test_speed_hint(
    scheduler: str, jobs: int | None, rate: float, cpus: int, names: str | None
) -> None:
    from snakemake_executor_plugin_dask_slurm.report.hints import speed_hint

    hint = speed_hint(scheduler, jobs, rate, cpus)
    if names is None:
        assert hint is None
    else:
        assert hint is not None and names in hint and "which you chose" in hint


def test_speed_hint_wants_a_subsample_for_unlimited_jobs() -> None:
    from snakemake_executor_plugin_dask_slurm.report.hints import speed_hint

    hint = speed_hint("greedy", None, 100000.0, 16, subsample=None)
    assert hint is not None and "greedy job scheduler over every ready job (quadratic)" in hint
    assert speed_hint("greedy", None, 100000.0, 16, subsample=500) is None


@pytest.mark.parametrize(
    ("said", "settings", "expected"),
    [
        (
            "srun: unrecognized option '--bogus'\nTry \"srun --help\"",
            {"--dask-slurm-srun-args": ("--bogus", "--mem=0")},
            "--bogus came from --dask-slurm-srun-args '--bogus --mem=0': fix or remove it there.",
        ),
        (
            "sbatch: error: invalid --qos=nosuch",
            {"--dask-slurm-sbatch-args": ("--qos=nosuch",)},
            "--qos came from --dask-slurm-sbatch-args --qos=nosuch: fix or remove it there.",
        ),
        # an option the user did not give, or a longer one that only starts alike
        ("srun: unrecognized option '--mem-bind'", {"--dask-slurm-srun-args": ("--mem=0",)}, None),
        ("anything", {}, None),
    ],
)
def test_blame_setting(
    said: str, settings: dict[str, tuple[str, ...]], expected: str | None
) -> None:
    from snakemake_executor_plugin_dask_slurm.report.hints import blame_setting

    assert blame_setting(said, settings) == expected

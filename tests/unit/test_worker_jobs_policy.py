"""The growth policy (pure, table-driven) and the pure parts of worker jobs: SLURM's
answers parsed, the sbatch command, the batch script, the recipe's JSON round trip, the
workers' names, the settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.spec import WorkerRecipe
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs import policy
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.policy import (
    PENDING,
    RUNNING,
    Decision,
    JobView,
    Situation,
    after_failure,
    decide,
)
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.pool import (
    batch_script,
    submission_env,
    worker_job_of,
)
from snakemake_executor_plugin_dask_slurm.config import resolve_growth
from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import finished_from_event
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import WorkerRef
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings
from snakemake_executor_plugin_dask_slurm.slurm.argv import (
    sbatch_command,
    scancel_command,
    squeue_command,
)
from snakemake_executor_plugin_dask_slurm.slurm.run import parse_sinfo, parse_squeue
from snakemake_executor_plugin_dask_slurm.worker.supervisor import worker_name

NOW = 1000.0


def situation(**kw: Any) -> Situation:
    base: dict[str, Any] = dict(
        now=NOW, backlog_cpus=0.0, jobs=(), max_jobs=4, cpus_per_job=8.0, idle_seconds=60.0,
        backlog_since=None, grow_after=5.0,
    )  # fmt: skip
    return Situation(**(base | kw))


def pending(job_id: str, cpus: float = 8.0, submitted: float = NOW - 1) -> JobView:
    return JobView(job_id, PENDING, cpus, None, submitted)


def running(job_id: str, idle_since: float | None = None) -> JobView:
    return JobView(job_id, RUNNING, 8.0, idle_since, NOW - 100)


CASES = [
    # (what, situation, decision)
    ("nothing waits: nothing to do", situation(), Decision()),
    (
        "a backlog younger than grow_after submits nothing",
        situation(backlog_cpus=40, backlog_since=NOW - 2),
        Decision(),
    ),
    (
        "a lasting backlog: as many jobs as it needs (40 CPUs / 8 a job)",
        situation(backlog_cpus=40, backlog_since=NOW - 10, max_jobs=10),
        Decision(submit=5),
    ),
    (
        "never more than max_jobs, pending and running together",
        situation(backlog_cpus=400, backlog_since=NOW - 10, jobs=[running("1")], max_jobs=3),
        Decision(submit=2),
    ),
    (
        "a partly covered backlog submits only the rest",
        situation(backlog_cpus=20, backlog_since=NOW - 10, jobs=[pending("1")]),
        Decision(submit=2),
    ),
    (
        "storm case: a queue that starts nothing for minutes submits nothing more",
        situation(
            backlog_cpus=32,
            backlog_since=NOW - 600,
            jobs=[pending(str(i), submitted=NOW - 590) for i in range(4)],
            max_jobs=100,
        ),
        Decision(),
    ),
    (
        "back-off: no submission before next_submission",
        situation(backlog_cpus=8, backlog_since=NOW - 10, next_submission=NOW + 5),
        Decision(),
    ),
    (
        "paused after repeated failures: no submission at all",
        situation(backlog_cpus=8, backlog_since=NOW - 10, paused=True),
        Decision(),
    ),
    (
        "quiet for less than idle_seconds: nothing is cancelled or retired",
        situation(empty_since=NOW - 30, jobs=[pending("1"), running("2", NOW - 100)]),
        Decision(),
    ),
    (
        "quiet long enough: pending jobs cancelled (newest first), idle running ones retired",
        situation(
            empty_since=NOW - 61,
            jobs=[
                pending("1", submitted=NOW - 50),
                pending("2", submitted=NOW - 10),
                running("3", NOW - 70),
                running("4", NOW - 10),  # idle, but not for long enough
                running("5", None),  # busy
            ],
        ),
        Decision(cancel=("2", "1"), retire=("3",)),
    ),
]


@pytest.mark.parametrize(("what", "given", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(what: str, given: Situation, expected: Decision) -> None:
    assert decide(given) == expected, what


def test_failures_back_off_then_pause() -> None:
    delays = []
    for n in range(1, policy.MAX_FAILURES + 1):
        when, paused = after_failure(n, NOW)
        delays.append(when - NOW)
        assert paused == (n >= policy.MAX_FAILURES)
    assert delays == [10.0, 20.0, 40.0, 80.0]
    assert after_failure(20, NOW)[0] - NOW == policy.BACKOFF_MAX


def test_sinfo_and_squeue_answers() -> None:
    sinfo = "n1|4|idle\nn2|4|mix\nn3|8|alloc\nn4|8|down*\nn5|16|drain\n"
    assert parse_sinfo(sinfo) == {"n1": 4, "n2": 4, "n3": 8}
    squeue = "12|RUNNING|n[1-2]\n13|PENDING|\n14|CANCELLED|n3\n"
    assert parse_squeue(squeue) == {
        "12": ("RUNNING", "n[1-2]"),
        "13": ("PENDING", ""),
        "14": ("CANCELLED", "n3"),
    }


def test_sbatch_command_is_an_argument_list_with_the_users_options_last() -> None:
    argv = sbatch_command(
        "/run/worker-job.py", job_name="dask-slurm-ab", output="/run/logs/worker-job-%j.out",
        nodes=2, cpus_per_node=None, time_limit="1:00:00", partition="short", account="proj",
        sbatch_args=["--qos=low", "--constraint=a b"], test_only=True,
    )  # fmt: skip
    assert argv == [
        "sbatch", "--parsable", "--test-only", "--job-name=dask-slurm-ab",
        "--output=/run/logs/worker-job-%j.out", "--nodes=2", "--exclusive",
        "--time=1:00:00", "--partition=short", "--account=proj", "--qos=low",
        "--constraint=a b", "/run/worker-job.py",
    ]  # fmt: skip
    sized = sbatch_command(
        "s", job_name="j", output="o", nodes=1, cpus_per_node=4, time_limit=None,
        partition=None, account=None, sbatch_args=(),
    )  # fmt: skip
    assert sized == [
        "sbatch", "--parsable", "--job-name=j", "--output=o", "--nodes=1",
        "--ntasks-per-node=1", "--cpus-per-task=4", "s",
    ]  # fmt: skip
    assert squeue_command(["1", "2"])[2:] == ["--jobs=1,2", "--states=all", "--format=%i|%T|%N"]
    assert scancel_command(["1", "2"]) == ["scancel", "1", "2"]


def test_batch_script_is_python_with_the_recipe_path_quoted(tmp_path: Path) -> None:
    recipe = tmp_path / "it's here" / "recipe.json"
    script = batch_script("/venv/bin/python", recipe)
    assert script.startswith("#!/venv/bin/python\n")
    namespace: dict[str, Any] = {}
    called: list[list[str]] = []
    code = script.replace(
        "from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.in_job import main",
        "main = lambda argv: called.append(argv) or 0",
    )
    with pytest.raises(SystemExit):
        exec(compile(code, "worker-job.py", "exec"), {"called": called} | namespace)
    assert called == [[str(recipe)]]


def test_recipe_survives_json() -> None:
    recipe = WorkerRecipe(
        python="/p", scheduler_file="/r/s.json", record_dir="/r/w", log_dir="/r/l",
        local_directory=None, interface="ib0", srun_args=("--cpu-bind=none",),
        extra_args=("--preload", "m", "--tls-ca-file", "/r/ca.pem"), restarts=0,
        env=(("A", "1"),), job_prefix=True,
    )  # fmt: skip
    assert WorkerRecipe.from_json(recipe.to_json()) == recipe


def test_worker_names_say_which_job_they_belong_to() -> None:
    env = {"SLURMD_NODENAME": "n3", "SLURM_JOB_ID": "1234", "SLURM_LOCALID": "1"}
    assert worker_name(env, "host", None, False, job_prefix=True) == "j1234-n3"
    assert worker_name(env, "host", None, True, job_prefix=True) == "j1234-n3-1"
    assert worker_name(env, "host", None, False) == "n3"
    assert worker_job_of("j1234-n3-1") == "1234"
    assert worker_job_of("n3") is None
    assert worker_job_of("jupiter-1") is None


def test_submission_env_drops_the_allocations_slurm_variables() -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_MEM_PER_NODE": "9", "SLURM_CONF": "/c", "PATH": "/b"}
    assert submission_env(env) == {"SLURM_CONF": "/c", "PATH": "/b"}


def settings(**kw: Any) -> Any:
    fields = {f.name: f.default for f in dataclasses.fields(ExecutorSettings)}
    return SimpleNamespace(**(fields | kw))


def test_growth_settings() -> None:
    assert resolve_growth(settings(), "srun") is None  # off inside an allocation
    sbatch_mode = resolve_growth(settings(), "sbatch")
    assert sbatch_mode is not None and sbatch_mode.max_jobs == 4
    given = resolve_growth(settings(worker_jobs=2, sbatch_args="--qos=low --comment='a b'"), "srun")
    assert given is not None and given.sbatch_args == ("--qos=low", "--comment=a b")
    with pytest.raises(DaskSlurmError, match="not in local mode"):
        resolve_growth(settings(worker_jobs=2), "local")
    with pytest.raises(DaskSlurmError, match="at least one"):
        resolve_growth(settings(worker_jobs=0), "sbatch")


def test_a_failure_event_names_its_worker() -> None:
    outcome = {"returncode": 1, "host": "n1", "started": 0.0, "finished": 1.0, "tail": ""}
    msg = {"key": "k", "ok": False, "outcome": outcome, "worker": "tls://10.0.0.1:5"}
    assert finished_from_event(msg).on is None  # type: ignore[union-attr]
    msg |= {"worker_name": "j7-n1", "worker_pid": 42}
    assert finished_from_event(msg).on == WorkerRef("j7-n1", 42)  # type: ignore[union-attr]

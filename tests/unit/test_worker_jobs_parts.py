"""The pure parts of worker jobs around the pool: SLURM's answers and commands, the batch
script and recipe, worker names, one worker job's states and end, the settings, a failure
event's worker."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.recipe import WorkerRecipe
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.job import (
    Action,
    End,
    Seen,
    State,
    WorkerJob,
    worker_job_of,
)
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.provider import (
    batch_script,
    submission_env,
)
from snakemake_executor_plugin_dask_slurm.config import resolve_growth
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import WorkerRef, finished_from_event
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings
from snakemake_executor_plugin_dask_slurm.slurm.argv import (
    sbatch_command,
    scancel_command,
    squeue_command,
)
from snakemake_executor_plugin_dask_slurm.slurm.run import Queued, parse_sinfo, parse_squeue
from snakemake_executor_plugin_dask_slurm.worker.supervisor import worker_name


def test_sinfo_and_squeue_answers() -> None:
    sinfo = "n1|4|idle\nn2|4|mix\nn3|8|alloc\nn4|8|down*\nn5|16|drain\n"
    assert parse_sinfo(sinfo) == {"n1": 4, "n2": 4, "n3": 8}
    squeue = (
        "12|RUNNING|n[1-2]|1:05\n13|PENDING||2:00\n14|CANCELLED|n3|0:00\n15|RUNNING|n1|UNLIMITED\n"
    )
    assert parse_squeue(squeue) == {
        "12": Queued("RUNNING", "n[1-2]", 65.0),  # time left: the limit less the time used
        "13": Queued("PENDING", "", 120.0),
        "14": Queued("CANCELLED", "n3", 0.0),
        "15": Queued("RUNNING", "n1", None),  # no time limit
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
    assert squeue_command(["1", "2"])[2:] == ["--jobs=1,2", "--states=all", "--format=%i|%T|%N|%L"]
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


def test_a_worker_jobs_states_follow_what_happened_to_it() -> None:
    job = WorkerJob("7", 4.0, submitted=100.0)
    assert job.state is State.PENDING and not job.ran
    assert job.seen(Queued("PENDING", "(null)", 600.0), 101.0) is None
    assert (job.nodes, job.end_at) == ((), None)  # pending: no nodes, no end yet
    assert job.seen(Queued("RUNNING", "n[1-2]", 600.0), 105.0) is Seen.STARTED
    assert (job.nodes, job.end_at, job.state, job.ran) == (("n1", "n2"), 705.0, State.PENDING, True)
    assert job.workers_hold({"j7-n1": 0}, 106.0) == (True, True)  # first to join
    assert job.workers_hold({"j7-n1": 0, "j7-n2": 2}, 107.0) == (False, True)
    assert job.workers_hold({"j7-n1": 0, "j7-n2": 0}, 108.0) == (False, False)
    assert (job.state, job.joined, job.idle_since) == (State.RUNNING, 106.0, 108.0)
    job.let_go(Action.LANDED, 690.0)
    assert job.state is State.LANDING and job.end is None and job.end_words() == "running"
    assert job.seen(Queued("COMPLETED", "n[1-2]", 0.0), 700.0) is Seen.ENDED
    assert (job.state, job.end, job.end_words()) == (State.ENDED, End.LANDED, "landed")
    assert job.node_seconds(999.0) == (700.0 - 105.0) * 2


@pytest.mark.parametrize(
    ("action", "state", "end", "words"),
    [
        (None, State.ENDED, End.UNDER_THE_RUN, "ended (cancelled)"),
        (Action.RETIRED, State.ENDED, End.RETIRED, "retired"),
        (Action.CANCELLED, State.ENDED, End.CANCELLED, "cancelled"),
        (Action.STOPPED, State.ENDED, End.STOPPED, "stopped"),
    ],
)
def test_a_worker_jobs_end_is_what_the_plugin_did_to_it_or_under_the_run(
    action: Action | None, state: State, end: End, words: str
) -> None:
    job = WorkerJob("7", 4.0, submitted=100.0)
    if action is not None:
        job.let_go(action, 101.0)
        assert job.state is State.RETIRING
    assert job.seen(Queued("CANCELLED by 0", "", None), 102.0) is Seen.ENDED
    assert (job.state, job.end, job.end_words(), job.slurm_state) == (
        state,
        end,
        words,
        "CANCELLED",
    )


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

"""The worker-job pool's loop against a scripted SLURM and scheduler (tests/slurm_script.py):
submit after a lasting backlog, see jobs start and their workers join, retire idle ones,
tell a job that ended under the run, back off and pause after failed submissions, cancel
everything at the end. Milliseconds; the behaviour on the real test cluster is
tests/test_slurm_growth.py's."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.recipe import WorkerRecipe
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs import policy
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs import pool as pool_module
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.growing import PoolGrowth
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.job import Action, End, State
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.landing import Lander
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.pool import (
    GROW_AFTER,
    POLL_SECONDS,
    WorkerJobs,
)
from snakemake_executor_plugin_dask_slurm.clusters.worker_jobs.provider import (
    GrowthCommands,
    SlurmProvider,
)
from snakemake_executor_plugin_dask_slurm.config import GrowthConfig
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.worker.clock import Runway
from tests.slurm_script import ScriptedScheduler, ScriptedSlurm

#: Ticks happen at T0 + x: in the past, so that lost_with_its_job()'s looks (now) come after
#: them.
T0 = time.time() - 3600


class Landings:
    """The run's side of a landing: what it was asked to do, and its answers."""

    def __init__(self) -> None:
        self.landed: list[tuple[str, list[str], float]] = []
        self.stopped: list[tuple[str, list[str]]] = []

    def land(self, job_id: str, keys: Sequence[str], hard_stop: float) -> tuple[int, int, int]:
        self.landed.append((job_id, list(keys), hard_stop))
        return 1, 1, len(keys) - 2  # one goes on, one stopped, the rest moved

    def stop(self, job_id: str, keys: Sequence[str]) -> int:
        self.stopped.append((job_id, list(keys)))
        return len(keys)


class Pool:
    def __init__(
        self, tmp_path: Path, max_jobs: int = 2, idle: float = 60.0, runway: Runway | None = None
    ) -> None:
        self.slurm = ScriptedSlurm()
        self.scheduler = ScriptedScheduler()
        self.said: list[str] = []
        self.warned: list[str] = []
        config = GrowthConfig(max_jobs, 1, None, "1:00:00", None, None, (), idle)
        recipe = WorkerRecipe(
            python="/p", scheduler_file=str(tmp_path / "s.json"), record_dir=str(tmp_path),
            log_dir=str(tmp_path / "logs"), local_directory=None, interface=None,
            srun_args=(), extra_args=(), restarts=0, env=(), job_prefix=True,
        )  # fmt: skip
        commands = GrowthCommands("sbatch", "squeue", "scancel", "sinfo", "srun")
        provider = SlurmProvider(config, recipe, tmp_path, "dask-slurm-t", commands, self.slurm)
        lander = Lander(provider, self.said.append, self.warned.append, runway, 120.0)
        self.jobs = WorkerJobs(lander)
        self.landings = Landings()
        self.jobs.lander.landings = self.landings
        provider.prepare()
        self.jobs.call_scheduler = self.scheduler

    def tick(self, at: float) -> None:
        self.slurm.now = T0 + at
        self.jobs.tick(T0 + at)


def test_prepare_checks_with_test_only_and_learns_the_nodes(tmp_path: Path) -> None:
    pool = Pool(tmp_path)
    assert pool.slurm.commands("sbatch")[0][:3] == ["sbatch", "--parsable", "--test-only"]
    assert pool.jobs.provider.node_cpus == {"n1": 4, "n2": 4, "n3": 8}
    assert pool.jobs.provider.cpus_per_job == 4.0  # one whole node, counted low
    assert pool.jobs.provider.offers() == [{"cpus": 4.0}, {"cpus": 8.0}]
    assert (tmp_path / "worker-jobs" / "worker-job.py").read_text().startswith("#!/p\n")


def test_prepare_names_the_options_when_slurm_refuses(tmp_path: Path) -> None:
    pool = Pool.__new__(Pool)
    slurm = ScriptedSlurm(refuse="sbatch: error: invalid partition specified: nosuch")
    config = GrowthConfig(2, 1, None, None, "nosuch", None, (), 60.0)
    recipe = WorkerRecipe("/p", "/s", "/r", str(tmp_path), None, None, (), (), 0, (), True)
    jobs = SlurmProvider(
        config, recipe, tmp_path, "t", GrowthCommands("sbatch", "squeue", "scancel", "sinfo",
        "srun"), slurm=slurm,
    )  # fmt: skip
    with pytest.raises(DaskSlurmError) as caught:
        jobs.prepare()
    assert "invalid partition specified: nosuch" in str(caught.value)
    assert "--dask-slurm-worker-job-partition nosuch" in str(caught.value)
    del pool


def test_a_lasting_backlog_submits_and_a_job_is_seen_to_start_join_and_retire(
    tmp_path: Path,
) -> None:
    pool = Pool(tmp_path, idle=10.0)
    pool.scheduler.waiting_cpus = 6.0
    pool.tick(0)
    assert pool.slurm.commands("sbatch")[1:] == []  # not before GROW_AFTER
    pool.tick(GROW_AFTER)
    submitted = [a for a in pool.slurm.commands("sbatch") if "--test-only" not in a]
    assert len(submitted) == 2  # 6 CPUs wait, one job brings 4 (counted low)
    assert pool.said[-1].startswith("submitted worker job(s) 100, 101 (dask-slurm-t)")
    pool.tick(GROW_AFTER + 1)  # pending jobs count as capacity to come: nothing more
    assert len([a for a in pool.slurm.commands("sbatch") if "--test-only" not in a]) == 2
    pool.slurm.start("100", "n2")
    pool.tick(GROW_AFTER + POLL_SECONDS + 1)
    assert any(line.startswith("worker job 100 started on n2 after") for line in pool.said)
    pool.scheduler.workers = {"j100-n2": 3}
    pool.scheduler.waiting_cpus = 0.0
    at = GROW_AFTER + POLL_SECONDS + 2
    pool.tick(at)
    assert any(
        line.startswith("worker job 100: 1 worker(s) joined (j100-n2)") for line in pool.said
    )
    pool.scheduler.workers = {"j100-n2": 0}  # idle from now on
    pool.tick(at + 1)
    pool.tick(at + 12)  # idle 11 s > 10 s: the pending one is cancelled, the idle one retired
    assert pool.jobs.jobs["101"].action is Action.CANCELLED
    assert pool.scheduler.retired == [["j100-n2"]]
    assert pool.jobs.jobs["100"].action is Action.RETIRED
    pool.slurm.end("100")
    pool.tick(at + 12 + POLL_SECONDS)
    assert pool.jobs.jobs["100"].end is End.RETIRED and pool.warned == []
    summary = pool.jobs.summary()
    assert summary is not None and summary.startswith("worker jobs: 2 submitted, 1 ran")


def test_a_job_whose_workers_join_one_step_after_the_other_is_announced_as_they_come(
    tmp_path: Path,
) -> None:
    """Nodes of two sizes start two srun steps, which join independently: the run says
    so each time more of the job's workers are in, and counts the job's wait once."""
    pool = Pool(tmp_path, idle=60.0)
    pool.scheduler.waiting_cpus = 12.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n1,n2,n3")
    at = GROW_AFTER + POLL_SECONDS + 1
    pool.tick(at)
    pool.scheduler.workers = {"j100-n1": 2, "j100-n2": 2}
    pool.tick(at + 1)
    pool.scheduler.workers = {"j100-n1": 2, "j100-n2": 2, "j100-n3": 4}
    pool.tick(at + 2)
    pool.tick(at + 3)
    joined = [line for line in pool.said if line.startswith("worker job 100: ")]
    assert [line.split(" s after")[0] for line in joined] == [
        f"worker job 100: 2 worker(s) joined (j100-n1, j100-n2), {at + 1 - GROW_AFTER:.0f}",
        "worker job 100: 3 worker(s) joined (j100-n1, j100-n2, j100-n3), "
        f"{at + 2 - GROW_AFTER:.0f}",
    ], pool.said
    assert len(pool.jobs.waits) == 1


def test_a_job_that_ends_under_the_run_is_told_once(tmp_path: Path) -> None:
    pool = Pool(tmp_path)
    pool.scheduler.waiting_cpus = 2.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n1")
    pool.tick(GROW_AFTER + POLL_SECONDS)
    pool.slurm.end("100", "TIMEOUT")
    pool.tick(GROW_AFTER + 2 * POLL_SECONDS)
    pool.tick(GROW_AFTER + 3 * POLL_SECONDS)
    assert len(pool.warned) == 1
    assert pool.warned[0].startswith("worker job 100 ended under the run (TIMEOUT) after running")
    assert pool.jobs.jobs["100"].end is End.UNDER_THE_RUN
    assert pool.jobs.jobs["100"].end_words() == "ended (timeout)"


def test_failed_submissions_back_off_then_growth_pauses(tmp_path: Path) -> None:
    pool = Pool(tmp_path)
    pool.slurm.refuse = "sbatch: error: QOSMaxSubmitJobPerUserLimit"
    pool.scheduler.waiting_cpus = 4.0
    pool.tick(0)
    at = GROW_AFTER
    for n in range(1, policy.MAX_FAILURES + 1):
        pool.tick(at)
        assert pool.jobs.failures == n
        at = pool.jobs.next_submission - T0
    assert pool.jobs.paused and "submissions in a row failed" in pool.warned[-1]
    assert not pool.jobs.active()  # nothing queued, and growth may not submit any more
    pool.tick(at + 1000)
    assert pool.jobs.failures == policy.MAX_FAILURES


def test_close_cancels_every_live_job_once_and_waits_until_none_is_listed(
    tmp_path: Path,
) -> None:
    pool = Pool(tmp_path)
    pool.scheduler.waiting_cpus = 8.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n1")
    pool.jobs.close()
    assert pool.slurm.commands("scancel") == [["scancel", "100", "101"]]
    assert {j.action for j in pool.jobs.jobs.values()} == {Action.STOPPED}
    assert all(j.ended is not None for j in pool.jobs.jobs.values())
    assert pool.warned == []


@pytest.mark.parametrize("ends_by_itself", [True, False], ids=["ends", "stays"])
def test_at_close_a_job_whose_workers_joined_may_end_before_it_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends_by_itself: bool
) -> None:
    """Its workers left with the run's close: it gets ENDING_GRACE to end by itself (a
    scancel meanwhile would write CANCELLED in its log); the queued one is cancelled at once,
    and one still listed after the grace is cancelled."""
    monkeypatch.setattr(pool_module, "ENDING_GRACE", 0.6)
    pool = Pool(tmp_path)
    pool.scheduler.waiting_cpus = 8.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n1")
    pool.scheduler.workers = {"j100-n1": 1}
    pool.tick(GROW_AFTER + POLL_SECONDS + 1)
    assert pool.jobs.jobs["100"].state is not State.PENDING
    if ends_by_itself:
        threading.Timer(0.2, pool.slurm.end, ("100",)).start()
    pool.jobs.close()
    cancelled = [["scancel", "101"]] + ([] if ends_by_itself else [["scancel", "100"]])
    assert pool.slurm.commands("scancel") == cancelled
    assert all(j.state is State.ENDED for j in pool.jobs.jobs.values()) and pool.warned == []


def test_a_job_failing_as_its_worker_job_ends_is_seen_as_lost(tmp_path: Path) -> None:
    pool = Pool(tmp_path)
    pool.scheduler.waiting_cpus = 4.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n3")
    pool.tick(GROW_AFTER + POLL_SECONDS)
    growth = PoolGrowth(pool.jobs)  # what the source asks the pool
    assert not growth.lost_with_its_job("j100-n3", time.time())  # running: an ordinary failure
    pool.slurm.end("100", "CANCELLED")
    assert growth.lost_with_its_job("j100-n3", time.time())
    assert not growth.lost_with_its_job("n2", time.time())  # not a worker job's worker


def test_a_bad_sbatch_args_option_is_blamed_on_that_setting(tmp_path: Path) -> None:
    slurm = ScriptedSlurm(refuse="sbatch: unrecognized option '--bogus'")
    config = GrowthConfig(2, 1, None, None, None, None, ("--bogus",), 60.0, only_source=True)
    recipe = WorkerRecipe("/p", "/s", "/r", str(tmp_path), None, None, (), (), 0, (), True)
    commands = GrowthCommands("sbatch", "squeue", "scancel", "sinfo", "srun")
    jobs = SlurmProvider(config, recipe, tmp_path, "t", commands, slurm=slurm)
    with pytest.raises(DaskSlurmError) as caught:
        jobs.prepare()
    assert str(caught.value) == (
        "sbatch refused the worker jobs (checked with sbatch --test-only before submitting "
        "anything): sbatch: unrecognized option '--bogus'. --bogus came from "
        "--dask-slurm-sbatch-args --bogus: fix or remove it there."
    )


def test_in_sbatch_mode_the_way_out_is_not_to_turn_worker_jobs_off() -> None:
    base = GrowthConfig(2, 1, None, None, None, None, (), 60.0)
    assert base.way_out == "or run without --dask-slurm-worker-jobs"
    only = GrowthConfig(2, 1, None, None, None, None, (), 60.0, only_source=True)
    assert "without --dask-slurm-cluster sbatch" in only.way_out


#: Worker jobs of 2 minutes: they land 30 s before their end, their hard stop 15 s before.
TWO_MINUTES = Runway(step=2, margin=30.0, safety=7.5, fresh=73.0, limit=120.0)


def test_a_worker_job_lands_before_its_limit_and_its_successor_comes_in_time(
    tmp_path: Path,
) -> None:
    pool = Pool(tmp_path, max_jobs=1, runway=TWO_MINUTES)
    pool.scheduler.waiting_cpus = 4.0
    pool.tick(0)
    pool.tick(GROW_AFTER)  # job 100 submitted
    pool.slurm.now = T0 + GROW_AFTER + 2
    pool.slurm.start("100", "n1", limit=120.0)  # ends at GROW_AFTER + 122
    end = GROW_AFTER + 122
    pool.scheduler.waiting_cpus = 0.0
    pool.scheduler.workers = {"j100-n1": 4}
    pool.scheduler.keys = {"j100-n1": ["run-1", "run-2", "wait-1", "wait-2"]}
    pool.tick(GROW_AFTER + POLL_SECONDS)  # seen to start and join: waited POLL_SECONDS
    assert pool.jobs.waits == [POLL_SECONDS]
    # Its successor is due at its landing point (end - 30 s), less the wait seen (5 s)
    # and a quarter more, less 15 s: end - 51.25 s. Not before, even at max_jobs.
    pool.tick(end - 52)
    assert [a for a in pool.slurm.commands("sbatch") if "--test-only" not in a][1:] == []
    pool.tick(end - 51)
    assert pool.said[-1].startswith(
        "submitted worker job 101 to replace 100 (it lands in 21 s) (dask-slurm-t; "
        "the longest wait for its workers so far: 5 s)"
    ), pool.said
    pool.slurm.start("101", "n2", limit=120.0)
    pool.tick(end - 40)  # the successor runs before its predecessor lands
    pool.scheduler.workers["j101-n2"] = 0
    pool.tick(end - 39)
    assert pool.jobs.jobs["101"].joined is not None
    assert pool.landings.landed == [] and pool.scheduler.landed == []
    pool.tick(end - 30)  # the landing point
    assert pool.scheduler.landed == [["j100-n1"]]
    assert pool.landings.landed == [("100", ["run-1", "run-2", "wait-1", "wait-2"], T0 + end - 15)]
    assert pool.jobs.jobs["100"].action is Action.LANDED
    assert pool.said[-1] == (
        "worker job 100 lands, 30 s before its time limit: no job starts there any more; 1 "
        "running job(s) expected to finish in time go on, 1 that could not are stopped (they "
        "run again elsewhere), 2 not started go to other workers; its successor is 101"
    )
    pool.scheduler.keys = {"j100-n1": ["run-1"]}
    pool.scheduler.workers["j100-n1"] = 1
    pool.tick(end - 16)
    assert pool.landings.stopped == [] and pool.scheduler.retired == []
    pool.tick(end - 15)  # the hard stop: what still runs there is stopped
    assert pool.landings.stopped == [("100", ["run-1"])]
    pool.scheduler.workers["j100-n1"] = 0
    pool.tick(end - 14)  # nothing left on its worker: it leaves through the scheduler
    assert pool.scheduler.retired == [["j100-n1"]]
    pool.slurm.end("100")  # its steps ended, so did the job: by itself
    pool.tick(end - 14 + POLL_SECONDS)
    assert pool.jobs.jobs["100"].end is End.LANDED
    assert pool.slurm.commands("scancel") == [] and pool.warned == []
    summary = pool.jobs.summary()
    assert summary is not None and summary.startswith("worker jobs: 2 submitted, 2 ran, for ")
    assert "(1 landed, 1 running)" in summary, summary
    assert summary.endswith(
        "; 2 job(s) stopped at a worker job's time limit (run again elsewhere), 2 moved "
        "unstarted off landing ones"
    ), summary


def test_a_landed_job_still_there_just_before_its_end_is_cancelled(tmp_path: Path) -> None:
    pool = Pool(tmp_path, runway=TWO_MINUTES)
    pool.scheduler.waiting_cpus = 4.0
    pool.tick(0)
    pool.tick(GROW_AFTER)
    pool.slurm.start("100", "n1", limit=60.0)
    pool.scheduler.workers = {"j100-n1": 1}
    pool.tick(GROW_AFTER + 1)
    end = GROW_AFTER + 60
    pool.tick(end - 30)  # lands; its one job runs on (a worker that never lets go)
    pool.tick(end - 6)
    assert pool.slurm.commands("scancel") == []
    pool.tick(end - 5)
    assert pool.slurm.commands("scancel") == [["scancel", "100"]]
    assert pool.warned == [
        "worker job 100 was still running 5 s before its time limit: cancelled (its "
        "workers' supervisors end what runs there)"
    ]
    pool.tick(end - 4)
    assert len(pool.slurm.commands("scancel")) == 1  # once

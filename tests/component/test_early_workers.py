"""clusters/early.py: local workers started before the cluster's plan, with real
supervisors, workers and warm processes (the runs that use them: tests/test_warm.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.early import EarlyWorkers
from snakemake_executor_plugin_dask_slurm.clusters.process import ManagedProcess, Status
from snakemake_executor_plugin_dask_slurm.clusters.process_cluster import managed
from snakemake_executor_plugin_dask_slurm.clusters.security import PlainTcp
from snakemake_executor_plugin_dask_slurm.clusters.spec import plan_local
from snakemake_executor_plugin_dask_slurm.config import RunConfig, resolve
from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings
from snakemake_executor_plugin_dask_slurm.warm import ZYGOTE_MODULE
from snakemake_executor_plugin_dask_slurm.worker.proctree import scan, session_members
from snakemake_executor_plugin_dask_slurm.worker.warm_host import PRIME_VARIABLE
from tests.component.prime import write_prime
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


def local_config(tmp_path: Path) -> RunConfig:
    config = resolve(ExecutorSettings(insecure=True), {}, tmp_path)
    assert config.cluster == "local"
    return config


def prime_env(tmp_path: Path) -> dict[str, str]:
    """A job command for the workers' warm processes to parse (as the run names it)."""
    return {PRIME_VARIABLE: str(write_prime(tmp_path))}


def zygotes(sid: int) -> list[int]:
    return [
        p.pid
        for p in scan().values()
        if p.sid == sid and p.alive and ZYGOTE_MODULE in Path(f"/proc/{p.pid}/cmdline").read_text()
    ]


def planned_worker(config: RunConfig, worker_env: dict[str, str], **extra: str) -> ManagedProcess:
    """The local worker the plan starts (two CPUs), its environment as the launch makes it."""
    spec = plan_local(
        config, 2, "a test", None, "127.0.0.1", sys.executable, os.getpid(), PlainTcp()
    )
    worker = managed(spec.workers[0])
    worker.env = {**(worker.env or {}), **worker_env, **extra}
    return worker


def test_the_planned_worker_is_the_early_one_and_takes_its_options(tmp_path: Path) -> None:
    """The early worker's warm process starts before any option is known; the plan's
    worker (same command head, same environment) is that process, sent its options."""
    config = local_config(tmp_path)
    worker_env = prime_env(tmp_path)
    early = EarlyWorkers.start(config, PlainTcp(), worker_env)
    try:
        (process,) = early.processes.values()
        assert process.proc is not None
        sid = process.proc.pid
        eventually("the warm process started before the options", lambda: zygotes(sid), 60)
        adopted = early.adopt(planned_worker(config, worker_env))
        assert adopted is process and process.status is Status.running
        assert early.processes == {} and early.not_adopted == {}
        # the worker read its options: its stdin is /dev/null now
        worker = next(p for p in scan().values() if p.ppid == sid and p.alive)
        eventually(
            "the worker took its options",
            lambda: os.readlink(f"/proc/{worker.pid}/fd/0") == "/dev/null",
            30,
        )
    finally:
        early.close()
        process.close()
    assert session_members(sid) == []


def test_an_early_worker_whose_environment_changed_is_stopped_not_used(tmp_path: Path) -> None:
    """A worker the plan would start otherwise (here: its environment has one more
    variable) is not the early one: that one is stopped with everything it started, and
    the launch starts the plan's."""
    config = local_config(tmp_path)
    early = EarlyWorkers.start(config, PlainTcp(), prime_env(tmp_path))
    (process,) = early.processes.values()
    assert process.proc is not None
    sid = process.proc.pid
    planned = planned_worker(config, prime_env(tmp_path), ADDED_LATER="1")
    assert early.adopt(planned) is None
    assert "environment is not the planned one (ADDED_LATER)" in early.not_adopted[planned.name]
    assert process.status is Status.closed
    assert session_members(sid) == []


def test_an_early_worker_that_died_before_the_plan_is_replaced(tmp_path: Path) -> None:
    """An early worker killed before the launch (its supervisor, SIGKILL) is not adopted:
    the launch starts the plan's worker, and says why in the detail log."""
    config = local_config(tmp_path)
    worker_env = prime_env(tmp_path)
    early = EarlyWorkers.start(config, PlainTcp(), worker_env)
    (process,) = early.processes.values()
    assert process.proc is not None
    process.proc.kill()
    process.proc.wait(10)
    planned = planned_worker(config, worker_env)
    assert early.adopt(planned) is None
    assert early.not_adopted[planned.name] == "it was killed by signal SIGKILL before the plan"
    sid = process.proc.pid
    eventually("the dead supervisor's worker ended", lambda: not session_members(sid), 20)


def test_the_early_workers_of_a_killed_snakemake_end_by_themselves(tmp_path: Path) -> None:
    """Snakemake killed (SIGKILL) after it started its workers early, before its launch:
    each worker reads the end of its stdin and exits, its supervisor ends its warm
    process and exits: nothing is left."""
    prime_env(tmp_path)
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from snakemake_executor_plugin_dask_slurm.clusters.early import EarlyWorkers
        from snakemake_executor_plugin_dask_slurm.clusters.security import PlainTcp
        from snakemake_executor_plugin_dask_slurm.config import resolve
        from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings
        settings = ExecutorSettings(insecure=True, workers=2)
        config = resolve(settings, {{}}, Path({str(tmp_path)!r}))
        env = {{{PRIME_VARIABLE!r}: {str(tmp_path / "prime.json")!r}}}
        early = EarlyWorkers.start(config, PlainTcp(), env)
        print(" ".join(str(p.proc.pid) for p in early.processes.values()), flush=True)
        sys.stdin.readline()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as helper:
        assert helper.stdout is not None and helper.stdin is not None
        sids = [int(pid) for pid in helper.stdout.readline().split()]
        assert len(sids) == 2

        def left() -> list[int]:
            return [pid for sid in sids for pid in session_members(sid)]

        try:
            eventually("each worker's warm process started", lambda: all(map(zygotes, sids)), 60)
            helper.stdin.write("die\n")
            helper.stdin.flush()
            assert helper.wait(30) == -9
            eventually("the early workers' sessions ended", lambda: not left(), 20)
        finally:
            helper.kill()
            for pid in left():
                os.kill(pid, 9)

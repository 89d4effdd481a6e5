"""A worker's look for the daemons of finished jobs (worker/preload.py ``end_orphans``)
reads every process of the machine only when it has a child that is not a running job:
on a node with thousands of processes (or the test cluster's shared ``/proc``) a full scan
costs tens of milliseconds, once a second per worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from snakemake_executor_plugin_dask_slurm.worker import proctree

#: Run in a fresh interpreter: it makes itself a child subreaper (as a worker does), which
#: the test process must not become.
SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from snakemake_executor_plugin_dask_slurm.worker import preload, proctree
    from snakemake_executor_plugin_dask_slurm.worker.running import JOBS

    assert proctree.become_subreaper()
    scans = []
    real_scan = proctree.scan
    def counted():
        scans.append(1)
        return real_scan()
    proctree.scan = counted

    # A running job's shell: a known child, so no scan.
    job = subprocess.Popen(["sleep", "30"], env={**os.environ, proctree.JOB_MARKER: "run"})
    JOBS.register("run", job, time.time())
    assert preload.end_orphans() == [] and scans == [], scans

    # A job that begins while the processes are read (its process exists, not yet
    # registered): never taken for an orphan, as the jobs are read after the processes.
    late = subprocess.Popen(["sleep", "30"], env={**os.environ, proctree.JOB_MARKER: "late"})
    def scan_while_a_job_begins():
        JOBS.begin("late")
        return counted()
    proctree.scan = scan_while_a_job_begins
    assert preload.end_orphans() == [] and late.poll() is None and scans == [1], scans
    JOBS.register("late", late, time.time())
    proctree.scan = counted
    scans.clear()

    # A finished job's daemon, re-parented here: found, and ended.
    env = {**os.environ, proctree.JOB_MARKER: "gone"}
    subprocess.run(["sh", "-c", "sleep 300 & echo $!"], env=env, check=True,
                   stdout=open("daemon.pid", "w"))
    daemon = int(open("daemon.pid").read())
    deadline = time.monotonic() + 10
    while daemon not in (proctree.own_children() or set()):
        assert time.monotonic() < deadline, "the daemon was never re-parented here"
        time.sleep(0.01)
    assert preload.end_orphans() == [daemon] and scans == [1], scans
    os.waitpid(daemon, 0)  # it was killed: reap it
    for proc in (job, late):
        proc.kill()
        proc.wait()
    print("ok")
    """
)


def test_own_children_are_those_a_full_scan_finds() -> None:
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    try:
        found = proctree.own_children()
        assert found is not None
        scanned = set(proctree.children_of(os.getpid(), proctree.scan()))
        assert {p.pid for p in sleepers} <= found == scanned
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()


def test_the_daemons_of_finished_jobs_are_found_without_reading_every_process(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr

"""The allocation's clock, in real allocations with short time limits on the project's SLURM
test cluster: a job that cannot finish in the time left is not started (declared with
``runtime``, or learned from its rule's earlier jobs), the run lands before SLURM's
SIGTERM with one message and the command to continue, the same batch script submitted
again completes the workflow with no --unlock or --rerun-incomplete, and SIGUSR1 lands a
run at once. Every output's content is checked."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import VENV_BIN, live_processes
from tests.waiting import eventually, still_running

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

SNAKEFILE = r"""
N = int(config.get("count", 60))

rule all:
    input: expand("out/s{i}.txt", i=range(N)), "out/slow.txt", "out/big.txt"

# 5 s each, a line a second; events.log says when each copy started and ended.
rule short:
    output: "out/s{i}.txt"
    params: token=config["token"]
    shell:
        'echo "start {wildcards.i} $(date +%s.%N)" >> events.log; '
        'for k in 1 2 3 4 5; do echo "{wildcards.i} $k" >> {output}; sleep 1; done; '
        'echo "end {wildcards.i} $(date +%s.%N)" >> events.log # {params.token}'

# No runtime; as long as the file slow-seconds says (longer than a first allocation).
rule slow:
    output: "out/slow.txt"
    params: token=config["token"]
    shell: 'for k in $(seq 1 $(cat slow-seconds)); do echo $k >> {output}; sleep 1; done '
           '# {params.token}'

# Declares 3 minutes: more than a 2-minute allocation has, well within a 5-minute one
# when chosen first (its priority), not a minute into it (when it would no longer fit).
rule big:
    output: "out/big.txt"
    priority: 10
    resources: runtime=3
    shell: "echo big > {output}"
"""


def check_outputs(workdir: Path, slow_lines: int | None) -> list[int]:
    """Every short output whole; slow.txt whole or absent. The shorts that exist."""
    done = []
    for path in sorted((workdir / "out").glob("s[0-9]*.txt")):
        i = int(path.stem[1:])
        assert path.read_text().splitlines() == [f"{i} {k}" for k in range(1, 6)], path
        done.append(i)
    slow = workdir / "out/slow.txt"
    if slow_lines is None:
        assert not slow.exists(), "a stopped job's output survived"
    else:
        assert slow.read_text().split() == [str(k) for k in range(1, slow_lines + 1)]
    return done


def check_clean(workdir: Path) -> None:
    """Nothing for the next run to clear: no lock, no incomplete marker."""
    locks = workdir / ".snakemake/locks"
    assert not locks.exists() or not list(locks.iterdir()), list(locks.iterdir())
    incomplete = workdir / ".snakemake/incomplete"
    assert not incomplete.exists() or not list(incomplete.iterdir())


def test_the_same_batch_script_again_and_again_finishes_the_workflow(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "slow-seconds").write_text("300")  # longer than the first allocation
    script = (
        "#!/bin/bash\n"
        f"cd {tmp_path}\n"
        f"export DASK_SLURM_TEST_TOKEN={no_leftovers}\n"
        f"exec {VENV_BIN / 'snakemake'} --executor dask-slurm --jobs 2 --keep-going "
        f"--config token={no_leftovers} count=40\n"
    )  # 40 shorts: more than the first allocation can run beside the slow job
    first = slurm_cluster.sbatch_and_wait(script, ["-N1", "-c2", "--time=2"], timeout=200)
    out = first.output
    # Snakemake ended by itself, before SLURM's time limit: FAILED (jobs not done), not
    # TIMEOUT or CANCELLED.
    assert first.state == "FAILED", (first.state, out)
    assert "SIGTERM" not in out and "CANCELLED" not in out, out
    assert re.search(r"allocation \d+ ends in 2 min, at [\d:]+ on every node", out), out
    # Declared too long for what is left: refused at once, with the numbers.
    assert re.search(
        r"rule big \(jobid \d+, attempt 1\) was not started: it needs about 3 min \(its "
        r"runtime resource\), but the allocation ends in \d+ (?:s|min)", out
    ), out  # fmt: skip
    # Learned: once the shorts are known to take ~5 s, none starts that would be cut.
    assert "90% percentile of" in out, out
    events = (tmp_path / "events.log").read_text().splitlines()
    started = {line.split()[1] for line in events if line.startswith("start")}
    ended = {line.split()[1] for line in events if line.startswith("end")}
    assert started == ended, f"short jobs cut: {started - ended}"
    # The landing: the unknown-duration job stopped, one message, the command to go on.
    assert "landing. No job starts any more" in out and "rule slow (1)" in out, out
    summary = re.search(r"the run landed before the allocation's time limit: (.*)", out)
    assert summary and "1 started job(s) stopped (their outputs removed)" in summary[1], out
    assert "--executor dask-slurm --jobs 2 --keep-going --config" in summary[1], out
    assert out.count("was not started") <= 2, out  # one message per rule (big, short)
    done = check_outputs(tmp_path, None)
    assert 5 <= len(done) < 40, done
    check_clean(tmp_path)

    # The same script again, in a new allocation (where the slow job is quick), finishes.
    (tmp_path / "slow-seconds").write_text("3")
    second = slurm_cluster.sbatch_and_wait(script, ["-N1", "-c2", "--time=5"], timeout=300)
    again = second.output
    assert second.state == "COMPLETED", (second.state, again)
    assert re.search(r"\d+ of \d+ steps \(100%\) done", again), again
    assert "landed" not in again and "was not started" not in again, again
    assert sorted(check_outputs(tmp_path, 3)) == list(range(40))
    assert (tmp_path / "out/big.txt").read_text() == "big\n"
    check_clean(tmp_path)


def test_sigusr1_lands_the_run_at_once(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "slow-seconds").write_text("300")
    with slurm_cluster.salloc_background(
        f"wt-{no_leftovers}",
        ["-N1", "-c2", "--time=10", f"--chdir={tmp_path}"],
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "2",
         "--keep-going", "--config", f"token={no_leftovers}", "count=1"],
        {"DASK_SLURM_TEST_TOKEN": no_leftovers},
    ) as proc:  # fmt: skip
        slow = tmp_path / "out/slow.txt"
        eventually("out/slow.txt", slow.exists, 90, 0.2, still_running(proc))
        snakemake = [pid for pid, cmd in live_processes(no_leftovers, str(tmp_path))
                     if "bin/snakemake" in cmd and "salloc" not in cmd]  # fmt: skip
        assert len(snakemake) == 1, snakemake
        signalled = time.monotonic()
        os.kill(snakemake[0], signal.SIGUSR1)  # what sbatch --signal=USR1@120 sends
        out, _ = proc.communicate(timeout=60)
    assert time.monotonic() - signalled < 20, out
    assert "SIGUSR1 received; the allocation ends in" in out and "landing." in out, out
    assert "the run landed before the allocation's time limit" in out, out
    assert proc.returncode != 0
    check_outputs(tmp_path, None)
    check_clean(tmp_path)


# 12 s each, with no runtime: learned from the first ones.
DEEP_QUEUE = r"""
rule all:
    input: expand("out/{i}.txt", i=range(300))

rule task:
    output: "out/{i}.txt"
    params: token=config["token"]
    shell:
        'echo "start {wildcards.i} $(date +%s.%N)" >> events.log; sleep 12; '
        'echo done > {output}; echo "end {wildcards.i} $(date +%s.%N)" >> events.log '
        '# {params.token}'
"""


@pytest.mark.timeout(240)
def test_a_landing_with_a_deep_queue_ends_as_soon_as_its_started_jobs_are_done(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """Far more jobs than CPUs (300 of 12 s on 16 CPUs, 2 minutes): what waits on the
    workers never starts once it could not finish (each worker refuses it, or the landing
    takes it back), and Snakemake ends as soon as the started jobs are done, before the
    hard stop; no started job is cut."""
    (tmp_path / "Snakefile").write_text(DEEP_QUEUE)
    script = (
        "#!/bin/bash\n"
        f"cd {tmp_path}\n"
        "date +%s.%N > began\n"
        f"export DASK_SLURM_TEST_TOKEN={no_leftovers}\n"
        f"{VENV_BIN / 'snakemake'} --executor dask-slurm --jobs 400 "
        f"--config token={no_leftovers}\n"
        "code=$?; date +%s.%N > ended; exit $code\n"
    )
    result = slurm_cluster.sbatch_and_wait(script, ["-N3", "--exclusive", "--time=2"], timeout=200)
    out = result.output
    assert result.state == "FAILED", (result.state, out)  # Snakemake's exit: landed
    assert "SIGTERM" not in out and "revoked" not in out and "CANCELLED" not in out, out
    began = float((tmp_path / "began").read_text())
    ended = float((tmp_path / "ended").read_text())
    events = [line.split() for line in (tmp_path / "events.log").read_text().splitlines()]
    starts = {e[1] for e in events if e[0] == "start"}
    ends = {e[1]: float(e[2]) for e in events if e[0] == "end"}
    assert starts == set(ends), f"started jobs cut: {starts - set(ends)}"
    # The allocation ends 120 s after it began (the script starts within a second); the
    # run lands a quarter of the time left at its start before (at least 25 s: every started
    # job began before that); its hard stop, half that before the end, found nothing left.
    assert max(float(e[2]) for e in events if e[0] == "start") < began + 120 - 25 + 1, out
    assert "to end before SLURM does" not in out, out
    # A few seconds: Snakemake's own end after its last job (its cluster closes in about
    # 2 s, its interpreter exits in 1-2 s); measured 4-7 s with the machine shared by four
    # test runs. Waiting for the hard stop would be 20 s and more.
    assert ended - max(ends.values()) < 10.0, (ended - max(ends.values()), out)
    assert ended - began < 120 - 5, (ended - began, out)  # Snakemake's own end, with time
    # Its last jobs may end before the landing point: the first job a worker refused (it
    # could not finish in time) stops Snakemake's scheduling, and it ends with them.
    summary = re.search(r"the run (?:landed before|ran up to) the allocation's time limit: "
                        r"(\d+) job\(s\) finished in this allocation", out)  # fmt: skip
    assert summary and int(summary[1]) == len(ends), out
    assert "started job(s) stopped" not in summary.string[summary.end() :].split("\n")[0], out
    for i in ends:
        assert (tmp_path / f"out/{i}.txt").read_text() == "done\n"
    assert len(list((tmp_path / "out").iterdir())) == len(ends)
    check_clean(tmp_path)

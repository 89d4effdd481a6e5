"""Failing jobs end the run promptly, each reported once, nothing left running: a pipe
group, a plain group and a single job, with and without --keep-going, many times over.

The pipe group used to hang the whole workflow (issue 16): a race in Snakemake's own pipe
groups (see dispatch/group_runner.py), which the workflow's slow-to-start consumer hits
in every run, so a regression shows in the first run, not in one of ten.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.report.messages import QUOTE
from snakemake_executor_plugin_dask_slurm.warm.tasks import PRIMING
from tests.conftest import VENV_BIN, Workflow, live_processes, wait_until_gone

pytestmark = pytest.mark.e2e

#: Runs per case. Only the pipe group races (Snakemake's own pipe groups, issue 16): 3 runs
#: each, with and without --keep-going, show a hang in 40% of its runs with 95% certainty
#: (1 - 0.6**6), and the known one in run 0 (the workflow's slow consumer hits it every
#: time). The plain group and the single job do not race: one run each, with and without
#: --keep-going, checks what they say. (6 x 6 runs took 118-160 s on this 2-core machine;
#: now 10.)
RUNS = {"pipe_group": 3, "plain_group": 1, "single": 1}
#: A run normally ends in 3-5 s; a hang is a run that has not ended after this.
RUN_TIMEOUT = 45.0

#: target -> (failed groups, Snakemake's "Error in rule" blocks per rule)
CASES = {
    "pipe_group": (2, {"produce": 2, "consume": 2}),
    "plain_group": (1, {"first": 1, "second": 1}),
    "single": (0, {"bad": 1}),
}


def reports(out: str) -> tuple[list[int], dict[str, int], int]:
    """Outside the quoted job output (whose own Snakemake reports the same failure): how
    often Snakemake reported each failed group, its 'Error in rule' blocks, and the
    plugin's reasons for failed groups."""
    own = "\n".join(line for line in out.splitlines() if not line.startswith(QUOTE))
    groups = collections.Counter(re.findall(r"message: Error in group (\S+)$", own, re.M))
    rules = collections.Counter(re.findall(r"^\s*Error in rule (\w+):$", own, re.M))
    reasons = len(re.findall(r"^Error in group \S+: group job ", own, re.M))
    return sorted(groups.values()), dict(rules), reasons


@pytest.mark.workflow("failures")
@pytest.mark.parametrize("keep_going", [False, True], ids=["stop", "keep-going"])
@pytest.mark.parametrize("target", list(CASES))
def test_a_failure_ends_the_run_promptly_and_is_reported_once(
    workflow: Workflow, target: str, keep_going: bool
) -> None:
    groups, rules = CASES[target]
    args = ["--jobs", "3", "--config", f"token={workflow.token}"]
    args += ["--keep-going"] * keep_going
    for attempt in range(RUNS[target]):
        run_dir = workflow.path.parent / f"run{attempt}"
        shutil.copytree(workflow.path, run_dir)
        wf = Workflow(run_dir, workflow.token)
        started = time.monotonic()
        try:
            run = wf.snakemake(*args, "--", target, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else e.output
            pytest.fail(f"run {attempt} hung (> {RUN_TIMEOUT} s):\n{out}")
        took = time.monotonic() - started
        assert run.returncode == 1, f"run {attempt}: {run}"
        assert reports(run.output) == ([1] * groups, rules, groups), f"run {attempt}: {run}"
        if target == "single" and keep_going:
            assert (run_dir / "out/good1.txt").exists(), f"run {attempt}: {run}"
        left = wait_until_gone(workflow.token, str(run_dir), timeout=5)
        assert not left, f"run {attempt} left processes running: {left}"
        if target == "plain_group":  # a workflow of group jobs only: primed all the same
            logs = (run_dir / ".snakemake/dask-slurm/logs").glob("warm-*.log")
            assert [log.read_text().count(PRIMING) for log in logs] == [1], run.output
        print(f"{target} keep_going={keep_going} run {attempt}: {took:.1f} s")


ONSTART_FAILS = """onstart:
    raise ValueError("the onstart handler fails")

rule all:
    input: "out.txt"

rule one:
    output: "out.txt"
    shell: "echo one > {output}"
"""


def test_a_run_that_fails_before_its_first_job_stops_the_cluster_it_launched(
    tmp_path: Path, no_leftovers: str
) -> None:
    """The cluster is launched when the executor starts (executor/run.py launch), before
    Snakemake's onstart handler; that handler fails, so Snakemake neither schedules nor
    calls the executor's shutdown(). What was launched is stopped before Snakemake exits
    (not later, by the scheduler's watch on its owner), and the run directory is free."""
    (tmp_path / "Snakefile").write_text(ONSTART_FAILS)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers)
    env.pop("SLURM_JOB_ID", None)
    done = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "2",
         "--dask-slurm-no-usage-report"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "the onstart handler fails" in said, said
    assert live_processes(no_leftovers, str(tmp_path)) == [], said
    assert not (tmp_path / ".snakemake/dask-slurm/run.lock").exists()
    assert not list((tmp_path / ".snakemake/dask-slurm").glob("tls-*")), said

"""Failing jobs end the run promptly, each reported once, nothing left running: a pipe
group, a plain group and a single job, with and without --keep-going, many times over.

The pipe group used to hang the whole workflow (issue 16): a race in Snakemake's own pipe
groups (see dispatch/group_runner.py), which the workflow's slow-to-start consumer hits
in every run, so a regression shows in the first run, not in one of ten.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import time

import pytest

from snakemake_executor_plugin_dask_slurm.report.messages import QUOTE
from tests.conftest import Workflow, wait_until_gone

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
        print(f"{target} keep_going={keep_going} run {attempt}: {took:.1f} s")

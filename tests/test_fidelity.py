"""Same results as Snakemake's own local executor: each workflow here runs once with
``snakemake --cores N`` and once with the plugin (both ways where they differ), and every
file it wrote must be the same, byte for byte, with the same name."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, WORKFLOWS, live_processes

pytestmark = pytest.mark.e2e

SNAKEMAKE = str(VENV_BIN / "snakemake")


def run(workdir: Path, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=token)
    env.pop("SLURM_JOB_ID", None)
    return subprocess.run(
        [SNAKEMAKE, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )


def outputs(workdir: Path) -> dict[str, bytes]:
    out = workdir / "out"
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def both(
    tmp_path: Path, token: str, name: str, local: tuple[str, ...], plugin: tuple[str, ...]
) -> tuple[dict[str, bytes], dict[str, bytes], subprocess.CompletedProcess[str]]:
    """Outputs of the local executor and of the plugin on copies of workflow ``name``."""
    mine, theirs = tmp_path / "local", tmp_path / "plugin"
    shutil.copytree(WORKFLOWS / name, mine)
    shutil.copytree(WORKFLOWS / name, theirs)
    done = run(mine, token, *local)
    assert done.returncode == 0, done.stdout + done.stderr
    ours = run(theirs, token, "--executor", "dask-slurm", *plugin)
    return outputs(mine), outputs(theirs), ours


@pytest.mark.parametrize("way", [(), ("--dask-slurm-no-direct-shell",)], ids=["direct", "general"])
def test_module_rules_and_expression_commands_run_what_snakemake_runs(
    tmp_path: Path, no_leftovers: str, way: tuple[str, ...]
) -> None:
    local, plugin, run = both(
        tmp_path, no_leftovers, "modules", ("--cores", "1"), ("--jobs", "2", *way)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert plugin == local
    assert local["out.txt"] == b"module none\n" and local["expr.txt"] == b"V=late\n"
    if not way:  # the module's plain rules still go the direct way (no Snakemake per job,
        # whose banner would be in the job's log: this silent job leaves no log at all)
        log = tmp_path / "plugin/.snakemake/dask-slurm/logs/jobs/m_write.attempt1.log"
        assert not log.exists()


def test_local_mode_treats_threads_gpus_and_memory_like_the_local_executor(
    tmp_path: Path, no_leftovers: str
) -> None:
    local, plugin, run = both(
        tmp_path, no_leftovers, "local_semantics", ("--cores", "2"),
        ("--jobs", "4", "--dask-slurm-cpus", "2"),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert plugin == local
    assert local["threads.txt"] == b"threads=2 omp=2\n"
    said = run.stdout + run.stderr
    assert "rule gpu: gpu=1 is counted by Snakemake only (limit it with --resources gpu=N)" in said
    assert "rule bigmem: mem_mb=1e+07 is more than a local worker has" in said


@pytest.mark.parametrize("way", [(), ("--dask-slurm-no-direct-shell",)], ids=["direct", "general"])
def test_wildcard_values_reach_the_job_exactly(
    tmp_path: Path, no_leftovers: str, way: tuple[str, ...]
) -> None:
    local, plugin, run = both(
        tmp_path, no_leftovers, "wildcard_values", ("--cores", "2"),
        ("--jobs", "4", "--keep-going", *way),
    )  # fmt: skip
    said = run.stdout + run.stderr
    unrepresentable = {"a,b.txt", "x'.txt", '"x.txt'}
    if not way:
        assert run.returncode == 0, said
        assert plugin == local
        return
    # Snakemake's job command cannot carry these: refused at once, named, never mangled.
    assert run.returncode != 0, said
    assert {k: v for k, v in local.items() if k not in unrepresentable} == plugin
    assert "cannot be passed to Snakemake's job command" in said, said
    assert "v='a,b'" in said


def test_a_failed_group_job_shows_its_reason_and_log(tmp_path: Path, no_leftovers: str) -> None:
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            """
            rule all:
                input: "out/b.txt"
            rule fails:
                output: "out/b.txt"
                group: "h"
                shell: "echo failing-here; exit 3"
            """
        )
    )
    done = run(tmp_path, no_leftovers, "--executor", "dask-slurm", "--jobs", "2")
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Error in group h: group job h_fails (fails) exited with code 1" in said, said
    assert "failing-here" in said and ".attempt1.log" in said


NOTHING_TWICE = """
import subprocess, sys, time
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ResourceSettings, OutputSettings
from snakemake_executor_plugin_dask_slurm import ExecutorSettings

def ours():
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if "distributed.cli" in l and sys.argv[1] in l]

for attempt in (1, 2):
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(resource_settings=ResourceSettings(nodes=2),
                          snakefile=Path("Snakefile"), workdir=Path("."))
        wf.dag().execute_workflow(executor="dask-slurm",
                                  executor_settings=ExecutorSettings(cluster="local", cpus=1))
    time.sleep(2)
    print(f"after run {attempt}: {len(ours())} Dask processes")
"""


def test_a_run_with_nothing_to_do_starts_and_leaves_nothing(
    tmp_path: Path, no_leftovers: str
) -> None:
    (tmp_path / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    shell: "echo a > {output}"\n'
    )
    (tmp_path / "api.py").write_text(NOTHING_TWICE)
    done = subprocess.run(
        [str(VENV_BIN / "python"), "api.py", str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=300, env=dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after run 1: 0 Dask processes" in done.stdout, done.stdout + done.stderr
    assert "after run 2: 0 Dask processes" in done.stdout, done.stdout + done.stderr
    assert not live_processes(no_leftovers, str(tmp_path))


def test_priorities_order_the_jobs_like_the_local_executor(
    tmp_path: Path, no_leftovers: str
) -> None:
    """Six ready jobs, one CPU: each runs in Snakemake's priority order (Snakemake's own
    test_priority, which failed before the plugin passed priorities to Dask)."""
    local, plugin, run = both(
        tmp_path, no_leftovers, "priority", ("--cores", "1"),
        ("--jobs", "10", "--dask-slurm-cluster", "local", "--dask-slurm-cpus", "1"),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert local["order.txt"] == b"a\ne\nk\nn\ns\nl\n"
    assert plugin == local

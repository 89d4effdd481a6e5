"""``envmodules:`` and exported shell functions (issue 29), with a real Lmod: every kind of
rule, on every way of the plugin (direct, warm, cold), against Snakemake's local executor;
and the same on the SLURM test cluster's nodes, in srun and sbatch modes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import VENV_BIN, WORKFLOWS
from tests.lmod import site_environment

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster

pytestmark = pytest.mark.e2e

SNAKEMAKE = str(VENV_BIN / "snakemake")
PLUGIN = ("--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-no-usage-report")
#: What a run: rule writes under the plugin. Snakemake's local executor spawns a run: job
#: through /bin/sh (``subprocess.check_call(cmd, shell=True)``), which drops exported
#: functions, so there `module` and `greet` are unknown: "none" and "no greet".
RUN_RULES = {"out/run.txt": b"1.0 tool 1.0 run\n", "out/run_greet.txt": b"hello run\n"}
LOCAL_RUN_RULES = {"out/run.txt": b"none\n", "out/run_greet.txt": b"no greet\n"}
#: Every other output, as the local executor writes it (checked against it, too).
EXPECTED = {
    "out/broken.txt": b"none\n",
    "out/greet.txt": b"hello shell\n",
    "out/group_a.txt": b"1.0 tool 1.0 group\n",
    "out/group_b.txt": b"1.0 tool 1.0 group\n2.0 tool 2.0\n",
    "out/missing.txt": b"none\n",
    "out/script.txt": b"1.0 tool 1.0 script\n",
    "out/shell/0.txt": b"1.0 tool 1.0 0\n",
    "out/shell/1.txt": b"1.0 tool 1.0 1\n",
    "out/shell/2.txt": b"1.0 tool 1.0 2\n",
    "out/two.txt": b"2.0 1.0 tool 2.0 two\n",
}
#: Lmod's own words for a module it does not know, and for one that fails to load.
UNKNOWN = 'The following module(s) are unknown: "nosuch/2.0"'
BROKEN = "broken/1.0 cannot be loaded on this host"


def says(text: str, words: str) -> bool:
    """Whether ``text`` has ``words``, however the module system wrapped its lines."""
    return " ".join(words.split()) in " ".join(text.split())


def outputs(workdir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workdir)): p.read_bytes()
        for p in sorted((workdir / "out").rglob("*"))
        if p.is_file()
    }


def job_logs(workdir: Path) -> str:
    logs = workdir / ".snakemake" / "dask-slurm" / "logs"
    return "\n".join(p.read_text(errors="replace") for p in sorted(logs.rglob("*.log")))


def run(workdir: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [SNAKEMAKE, "--sdm", "env-modules", *args], cwd=workdir, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.returncode, done.stdout


def site(tmp_path: Path, token: str) -> dict[str, str]:
    env = site_environment(tmp_path / "site")
    env.pop("SLURM_JOB_ID", None)
    env["DASK_SLURM_TEST_TOKEN"] = token
    return env


def check_plugin_run(workdir: Path, code: int, said: str) -> None:
    assert code == 0, said
    assert outputs(workdir) == {**EXPECTED, **RUN_RULES}, said
    assert "went the cold way" not in said or "envmodules:" not in said, said
    logs = job_logs(workdir) + said
    assert says(logs, UNKNOWN) and says(logs, BROKEN), logs[-3000:]
    assert "module: command not found" not in logs


@pytest.mark.timeout(300)
def test_modules_and_exported_functions_on_every_way_as_locally(
    tmp_path: Path, no_leftovers: str
) -> None:
    env = site(tmp_path, no_leftovers)
    ways = {
        "local": ("--cores", "2"),
        # shell: rules the direct way, the others warm
        "default": PLUGIN,
        # every job warm
        "warm": (*PLUGIN, "--dask-slurm-no-direct-shell"),
        # every job a fresh Snakemake
        "cold": (*PLUGIN, "--dask-slurm-no-direct-shell", "--dask-slurm-no-warm"),
    }
    for way, args in ways.items():
        workdir = tmp_path / way
        shutil.copytree(WORKFLOWS / "envmodules", workdir)
        code, said = run(workdir, env, *args)
        if way == "local":
            assert code == 0, said
            assert outputs(workdir) == {**EXPECTED, **LOCAL_RUN_RULES}, said
            assert says(said, UNKNOWN) and says(said, BROKEN), said
            continue
        check_plugin_run(workdir, code, f"{way}:\n{said}")
        if way == "default":
            # the direct way says what shell() says, in the main output, as locally
            assert said.count("Activating environment modules: tool/1.0") >= 3, said
        if way == "cold":
            assert "went the cold way" in said and "envmodules:" not in said, said


def test_a_rule_whose_modules_are_not_loaded_says_so_without_a_module_system(
    tmp_path: Path, no_leftovers: str
) -> None:
    """No `module` in the job's shell (a site without modules on this node): the job's
    command still runs, as Snakemake's `;` after `module load` lets it, and its log has the
    shell's own error (as locally)."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    envmodules: "tool/1.0"\n'
        '    shell: "echo ${{TOOL_VERSION:-none}} > {output}"\n'
    )
    env = site(tmp_path, no_leftovers)
    env = {k: v for k, v in env.items() if not k.startswith("BASH_FUNC_module")}
    code, said = run(workdir, env, *PLUGIN)
    assert code == 0, said
    assert (workdir / "a.txt").read_text() == "none\n"
    assert "module: command not found" in job_logs(workdir), said


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_modules_load_on_the_test_clusters_nodes_in_srun_and_sbatch_modes(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, no_leftovers: str
) -> None:
    """The jobs run on the nodes, with the environment srun and sbatch give them there."""
    env = site_environment(tmp_path / "site", base=slurm_cluster.env)
    env["DASK_SLURM_TEST_TOKEN"] = no_leftovers
    # srun mode: shell: rules the direct way, the others warm
    workdir = tmp_path / "srun"
    shutil.copytree(WORKFLOWS / "envmodules", workdir)
    argv = [SNAKEMAKE, "--sdm", "env-modules", *PLUGIN]
    proc = slurm_cluster.salloc(
        ["-N2", f"--chdir={workdir}", "--time=5"], argv, timeout=300, env_extra=env
    )
    said = proc.stdout + proc.stderr
    check_plugin_run(workdir, proc.returncode, f"srun:\n{said}")
    assert "dask-slurm: srun" in said, said
    # sbatch mode, from the login side: the general way cold
    workdir = tmp_path / "sbatch"
    shutil.copytree(WORKFLOWS / "envmodules", workdir)
    try:
        code, said = run(
            workdir, env, *PLUGIN, "--dask-slurm-cluster", "sbatch",
            "--dask-slurm-worker-jobs", "1", "--dask-slurm-no-warm",
        )  # fmt: skip
    finally:
        slurm_cluster.cancel_all()
    check_plugin_run(workdir, code, f"sbatch:\n{said}")
    assert "worker job" in said, said

"""Every bad input a user can give, one case each: Snakemake must exit non-zero within a
bound, with a message that names the cause (not a traceback from inside Dask), and leave
nothing running. Cases that need SLURM are in test_slurm_plugin.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

SNAKEFILE = 'rule a:\n    output: "a.txt"\n    shell: "echo a > {output}"\n'
#: The same job the warm way (a `run:` block): the run has a job command to prime.
WARM_SNAKEFILE = 'rule a:\n    output: "a.txt"\n    run:\n        open(output[0], "w")\n'


@dataclass
class Case:
    args: tuple[str, ...]
    said: tuple[str, ...]  # all of these appear in the output
    within: float = 20.0  # seconds from start to exit
    env: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[Path], None] | None = None  # sets up the working directory
    wrap: Callable[[Path], list[str]] = lambda path: []  # what Snakemake's argv runs under
    starts_nothing: bool = False  # refused before any process of the run is started
    warm: bool = False  # the workflow's job goes the warm way
    checked_first: bool = False  # refused before local mode's threads are capped (and said)


def stale_scheduler_file(path: Path) -> None:
    """A scheduler file whose scheduler is gone: a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (path / "stale.json").write_text(json.dumps({"address": f"tcp://127.0.0.1:{port}"}))


def a_file_where_the_run_dir_goes(path: Path) -> None:
    (path / "rundir").write_text("not a directory")


def read_only(path: Path) -> list[str]:
    """Run Snakemake with ``path/reports`` read-only: its mode for a user, a read-only bind
    mount of it in a mount namespace of Snakemake's own for root (whom modes do not stop)."""
    reports = path / "reports"
    reports.mkdir()
    if os.geteuid() != 0:
        reports.chmod(0o555)
        return []
    if not shutil.which("unshare"):
        pytest.skip("root needs unshare(1) for a read-only directory")
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(reports)]


def dead_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


CASES = {
    "unknown-cluster": Case(("--dask-slurm-cluster", "pbs"), ("invalid choice: 'pbs'",)),
    "zero-workers": Case(
        ("--dask-slurm-workers", "0"), ("--dask-slurm-workers must be at least 1",)
    ),
    "negative-cpus": Case(("--dask-slurm-cpus", "-2"), ("--dask-slurm-cpus must be at least 1",)),
    "zero-timeout": Case(
        ("--dask-slurm-startup-timeout", "0"), ("--dask-slurm-startup-timeout must be at least 1",)
    ),
    "more-workers-than-cpus": Case(
        ("--dask-slurm-cpus", "2", "--dask-slurm-workers", "100"),
        ("--dask-slurm-workers 100 is more than the 2 CPUs of the local Dask cluster",),
    ),
    "more-workers-than-cores-warm": Case(
        # with a job that goes the warm way, local mode starts its workers before the plan
        # (clusters/early.py); the plan's error stops them (nothing_left checks)
        ("--cores", "2", "--dask-slurm-workers", "3"),
        ("--dask-slurm-workers 3 is more than the 2 CPUs of the local Dask cluster",),
        warm=True,
    ),
    "file-locking-choice": Case(
        ("--dask-slurm-file-locking", "maybe"), ("invalid choice: 'maybe'",)
    ),
    "workers-not-a-number": Case(
        (),
        ("argument --dask-slurm-workers: invalid int value: 'many'",),
        env={"SNAKEMAKE_DASK_SLURM_WORKERS": "many"},
    ),
    "no-such-interface": Case(
        ("--dask-slurm-interface", "nosuch0"),
        ("There is no network interface 'nosuch0'", "Interfaces here: "),
    ),
    "scheduler-host-not-here": Case(
        ("--dask-slurm-scheduler-host", "192.0.2.77"),
        ("The scheduler cannot listen on 192.0.2.77", "Cannot assign requested address"),
    ),
    "scheduler-host-unresolvable": Case(
        ("--dask-slurm-scheduler-host", "no-such-host.invalid"),
        ("The scheduler cannot listen on 'no-such-host.invalid'", "does not resolve"),
    ),
    "run-dir-unwritable": Case(
        ("--dask-slurm-run-dir", "/proc/dask-slurm"),
        ("Cannot use /proc/dask-slurm as the plugin's run directory", "--dask-slurm-run-dir"),
        checked_first=True,
    ),
    "run-dir-is-a-file": Case(
        ("--dask-slurm-run-dir", "rundir"),
        ("as the plugin's run directory", "rundir"),
        prepare=a_file_where_the_run_dir_goes,
        checked_first=True,
    ),
    "usage-report-dir-in-proc": Case(
        ("--dask-slurm-usage-report-dir", "/proc/dask-slurm-reports"),
        (
            "Cannot write the usage report under /proc/dask-slurm-reports",
            "--dask-slurm-usage-report-dir",
            "--dask-slurm-no-usage-report",
        ),
        within=10,
        starts_nothing=True,
        checked_first=True,
    ),
    "usage-report-dir-under-a-file": Case(
        ("--dask-slurm-usage-report-dir", "afile/reports"),
        ("Cannot write the usage report under", "afile/reports: Not a directory"),
        within=10,
        prepare=lambda path: (path / "afile").write_text("a file") and None,
        starts_nothing=True,
        checked_first=True,
    ),
    "usage-report-dir-read-only": Case(
        ("--dask-slurm-usage-report-dir", "reports"),
        (
            "Cannot write the usage report under",
            f"reports: {'Read-only file system' if os.geteuid() == 0 else 'Permission denied'}",
        ),
        within=10,
        wrap=read_only,
        starts_nothing=True,
        checked_first=True,
    ),
    "scheduler-file-unwritable": Case(
        ("--dask-slurm-scheduler-file", "/proc/dask-slurm/s.json"),
        ("The Dask scheduler exited with code", "/proc/dask-slurm/s.json"),
    ),
    "worker-option-unknown": Case(
        ("--dask-slurm-worker-args=--bogus-option 1",),
        ("--dask-slurm-worker-args: 'dask worker' does not accept --bogus-option",),
    ),
    "worker-args-unbalanced-quote": Case(
        ("--dask-slurm-worker-args=--memory-limit '4GB",),
        ("Cannot split --dask-slurm-worker-args",),
    ),
    "srun-args-unbalanced-quote": Case(
        ("--dask-slurm-srun-args=--comment 'x",), ("Cannot split --dask-slurm-srun-args",)
    ),
    "local-directory-unwritable": Case(
        ("--dask-slurm-local-directory", "/proc/dask-slurm-scratch"),
        ("local Dask worker local", "/proc/dask-slurm-scratch"),
        within=40,
    ),
    "srun-outside-an-allocation": Case(
        ("--dask-slurm-cluster", "srun"), ("needs a SLURM allocation, but SLURM_JOB_ID is not set",)
    ),
    "attach-without-a-scheduler": Case(
        ("--dask-slurm-cluster", "attach"), ("needs a scheduler to attach to",)
    ),
    "attach-with-file-and-address": Case(
        (
            "--dask-slurm-cluster",
            "attach",
            "--dask-slurm-scheduler-file",
            "s.json",
            "--dask-slurm-scheduler-address",
            "tcp://127.0.0.1:8786",
        ),
        ("not both",),
    ),
    "attach-address-malformed": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-address", "somewhere"),
        ("Invalid --dask-slurm-scheduler-address 'somewhere'",),
    ),
    "attach-nothing-listens": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-address", dead_port()),
        ("Cannot connect to the Dask scheduler at tcp://127.0.0.1:", "nothing listens there"),
        within=10,
    ),
    "attach-stale-scheduler-file": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", "stale.json"),
        ("nothing listens there", "the file is stale"),
        within=10,
        prepare=stale_scheduler_file,
    ),
    "attach-scheduler-file-never-written": Case(
        (
            "--dask-slurm-cluster",
            "attach",
            "--dask-slurm-scheduler-file",
            "later.json",
            "--dask-slurm-startup-timeout",
            "3",
        ),
        ("The scheduler file", "later.json does not exist after 3 s"),
    ),
    "attach-scheduler-file-not-json": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", "bad.json"),
        ("Cannot attach with the scheduler file", "bad.json: it is not JSON"),
        within=10,
        prepare=lambda path: (path / "bad.json").write_text("this is { not json") and None,
    ),
    "attach-scheduler-file-without-address": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", "noaddr.json"),
        ("noaddr.json: it holds no scheduler address",),
        within=10,
        prepare=lambda path: (path / "noaddr.json").write_text('{"id": 1}') and None,
    ),
    "attach-scheduler-file-in-no-directory": Case(
        ("--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", "nodir/s.json"),
        ("nodir/s.json: its directory", "does not exist"),
        within=10,
    ),
    "address-outside-attach": Case(
        ("--dask-slurm-scheduler-address", "tcp://127.0.0.1:8786"),
        ("--dask-slurm-scheduler-address only applies to --dask-slurm-cluster attach",),
    ),
    "srun-args-value-without-equals": Case(
        ("--dask-slurm-srun-args", "--mem=0"), ("expected one argument",)
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_named_at_once(name: str, tmp_path: Path, no_leftovers: str) -> None:
    case = CASES[name]
    (tmp_path / "Snakefile").write_text(WARM_SNAKEFILE if case.warm else SNAKEFILE)
    if case.prepare:
        case.prepare(tmp_path)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers, **case.env)
    env.pop("SLURM_JOB_ID", None)
    wrap = case.wrap(tmp_path)
    begin = time.monotonic()
    proc = subprocess.run(
        [*wrap, str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "2",
         *case.args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=case.within + 60,
    )  # fmt: skip
    took = time.monotonic() - begin
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert took < case.within, f"{took:.1f} s"
    for text in case.said:
        assert text in out, out
    assert "distributed/" not in out, "a traceback from inside Dask reached the user"
    assert not (tmp_path / "a.txt").exists()
    if case.checked_first:
        assert "threads will be scaled down" not in out, out
    if case.starts_nothing:  # no scheduler, no worker: neither wrote its log
        assert not list((tmp_path / ".snakemake" / "dask-slurm").glob("logs/*")), out
    # (no_leftovers: nothing of the run is left running)


@pytest.fixture
def rerunning_scheduler(tmp_path: Path, no_leftovers: str) -> Iterator[Path]:
    """A scheduler with Dask's default allowed-failures (3), and one worker."""
    path = tmp_path / "scheduler.json"
    python = str(VENV_BIN / "python")
    env = {k: v for k, v in os.environ.items() if "ALLOWED_FAILURES" not in k}
    procs = [
        subprocess.Popen(
            [python, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(path),
             "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [python, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(path),
             "--nthreads", "1", "--resources", "cpus=1", "--no-dashboard"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    try:
        eventually(f"the scheduler file {path}", path.exists, 60, interval=0.1)
        yield path
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


def test_attach_refuses_a_scheduler_that_reruns_tasks(
    rerunning_scheduler: Path, tmp_path: Path, no_leftovers: str
) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1",
         "--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", str(rerunning_scheduler)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "allowed-failures = 3" in out and "ALLOWED_FAILURES=0" in out, out
    assert not (tmp_path / "a.txt").exists()


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (("--dask-slurm-srun-args=--comment x",), "--dask-slurm-srun-args is ignored on the local"),
    ],
)
def test_a_setting_the_mode_does_not_use_is_named_and_ignored(
    tmp_path: Path, no_leftovers: str, args: tuple[str, ...], warning: str
) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers)
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert warning in out, out
    assert (tmp_path / "a.txt").read_text() == "a\n"

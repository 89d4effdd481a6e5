"""Pytest fixtures for tests that need the SLURM test cluster (see README.md here).

Register with ``pytest_plugins = ["tests.slurm_cluster.fixtures"]`` (in tests/conftest.py
or a test module), then request ``slurm_cluster``::

    @pytest.mark.slurm
    def test_hostnames(slurm_cluster: SlurmTestCluster) -> None:
        out = slurm_cluster.salloc(["-N3", "--exclusive"], ["srun", "hostname"], timeout=60)
        assert sorted(out.stdout.split()) == ["n1", "n2", "n3"]

The cluster is started once per session and stopped at its end, unless it was already
running (then it is left running, as is the case with DASK_SLURM_KEEP_CLUSTER=1). Without
root or Linux the tests are skipped; with CI set (CI=true) or DASK_SLURM_REQUIRE_CLUSTER=1
they fail instead, so that a CI run can never silently skip them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.states import Phase, phase
from testcluster import cluster

REQUIRE_ENV = "DASK_SLURM_REQUIRE_CLUSTER"
KEEP_ENV = "DASK_SLURM_KEEP_CLUSTER"
QUIET_GRACE = 5.0  # seconds a test's jobs may take to end by themselves after the test
CLEANUP_TIMEOUT = 30.0

_TIMINGS: list[tuple[str, float]] = []
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


class SlurmCommandTimeout(AssertionError):
    """A slurm command (or the job it waited for) did not finish within its bound."""


@dataclass(frozen=True)
class JobRow:
    job_id: str
    name: str
    user: str
    state: str
    nodes: str


@dataclass(frozen=True)
class StepRow:
    step_id: str
    name: str
    user: str
    nodes: str


@dataclass(frozen=True)
class BatchResult:
    job_id: str
    state: str
    exit_code: str  # SLURM's "code:signal", e.g. "0:0"
    output: str


def _end_process_group(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM the command's process group (srun/salloc forward it), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.communicate(timeout=5.0)
    return "", ""


def run_bounded(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float,
    on_timeout: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv with output captured; past timeout, end it and raise SlurmCommandTimeout."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if on_timeout is not None:
            on_timeout()
        out, err = _end_process_group(proc)
        raise SlurmCommandTimeout(
            f"`{shlex.join(argv)}` did not finish within {timeout:g} s and was ended "
            f"(a request SLURM cannot satisfy stays PENDING forever).\n"
            f"stdout: {out.strip()}\nstderr: {err.strip()}"
        ) from None
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _rows(text: str, fields: int) -> list[list[str]]:
    return [line.split("|", fields - 1) for line in text.splitlines() if line.strip()]


class SlurmTestCluster:
    """A running test cluster, as seen by a test: its environment, nodes and helpers."""

    def __init__(self, info: cluster.ClusterInfo) -> None:
        self.info = info
        self.env: dict[str, str] = info.env()
        self.nodes: list[tuple[str, int, str]] = [(n.name, n.cpus, n.address) for n in info.nodes]
        self.login_address: str = info.login_address
        self.state_dir: Path = info.state_dir
        self.slurm_conf: Path = info.slurm_conf

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 30.0,
        env_extra: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a (slurm client) command against this cluster, output captured, bounded."""
        return run_bounded(argv, {**self.env, **(env_extra or {})}, timeout)

    def salloc(
        self,
        salloc_args: Sequence[str],
        argv: Sequence[str],
        timeout: float = 60.0,
        env_extra: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv (on the login host) inside `salloc <salloc_args>`, bounded by timeout.

        On timeout the allocation is scancelled by its unique job name, salloc and argv
        are ended, and SlurmCommandTimeout is raised.
        """
        name = f"pytest-salloc-{uuid.uuid4().hex[:8]}"
        full = ["salloc", f"--job-name={name}", *salloc_args, *argv]

        def cancel() -> None:
            self.run(["scancel", f"--name={name}"], timeout=15)

        return run_bounded(full, {**self.env, **(env_extra or {})}, timeout, cancel)

    @contextlib.contextmanager
    def salloc_background(
        self,
        name: str,
        salloc_args: Sequence[str],
        argv: Sequence[str],
        env_extra: Mapping[str, str] | None = None,
        stdout: Any = subprocess.PIPE,
    ) -> Iterator[subprocess.Popen[str]]:
        """``argv`` inside ``salloc --job-name=<name> <salloc_args>``, in the background
        and in a session of its own, output (with stderr) to ``stdout``. On leaving, if it
        still runs: the allocation is cancelled by name, the session killed, salloc waited
        for."""
        proc = subprocess.Popen(
            ["salloc", f"--job-name={name}", *salloc_args, *argv],
            env={**self.env, **(env_extra or {})},
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # so that a failure can end salloc *and* argv
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                self.run(["scancel", f"--name={name}"], timeout=15)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()

    def sbatch(self, script: str | Path, args: Sequence[str] = ()) -> str:
        """Submit a batch script (its text, or a Path to it) and return the job id."""
        if isinstance(script, str):  # sbatch reads the script at submission
            with tempfile.TemporaryDirectory(prefix="dask-slurm-job-") as tmp:
                path = Path(tmp) / "job.sh"
                path.write_text(script)
                return self.sbatch(path, args)
        proc = self.run(["sbatch", "--parsable", *args, str(script)], timeout=30)
        if proc.returncode != 0:
            raise AssertionError(f"sbatch failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]

    def wait_job(self, job_id: str, timeout: float = 60.0) -> tuple[str, str]:
        """Wait until the job has ended; return (JobState, ExitCode). Bounded."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job_fields(job_id)
            state = fields.get("JobState", "")
            if state and phase(state) is Phase.ENDED:
                return state, fields.get("ExitCode", "")
            if time.monotonic() > deadline:
                self.run(["scancel", job_id], timeout=15)
                raise SlurmCommandTimeout(
                    f"Job {job_id} did not end within {timeout:g} s (state {state or '?'}, "
                    f"reason {fields.get('Reason', '?')}); it was scancelled."
                )
            time.sleep(0.05)

    def job_fields(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (empty once SLURM has forgotten the job)."""
        proc = self.run(["scontrol", "show", "job", "-o", job_id], timeout=15)
        pairs = (word.split("=", 1) for word in proc.stdout.split() if "=" in word)
        return {key: value for key, value in pairs}

    def sbatch_and_wait(
        self, script: str | Path, args: Sequence[str] = (), timeout: float = 60.0
    ) -> BatchResult:
        """Submit a batch script, wait (bounded) until it ends, return its state and output."""
        with tempfile.TemporaryDirectory(prefix="dask-slurm-sbatch-") as tmp:
            out = Path(tmp) / "job.out"
            job_id = self.sbatch(script, [f"--output={out}", *args])
            state, exit_code = self.wait_job(job_id, timeout)
            text = out.read_text() if out.exists() else ""
        return BatchResult(job_id, state, exit_code, text)

    def squeue_jobs(self) -> list[JobRow]:
        """Jobs SLURM still knows as pending/running/completing."""
        proc = self.run(["squeue", "-h", "-o", "%i|%u|%T|%N|%j"], timeout=15)
        return [JobRow(i, name, u, t, n) for i, u, t, n, name in _rows(proc.stdout, 5)]

    def squeue_steps(self) -> list[StepRow]:
        """Rows of `squeue -s`: every running job step."""
        proc = self.run(["squeue", "-h", "-s", "-o", "%i|%u|%N|%j"], timeout=15)
        return [StepRow(i, name, u, n) for i, u, n, name in _rows(proc.stdout, 4)]

    def node_states(self) -> dict[str, str]:
        return cluster.node_states(self.env)

    def leftovers(self) -> list[str]:
        jobs = [f"job {j.job_id} ({j.name}, {j.state} on {j.nodes})" for j in self.squeue_jobs()]
        steps = [f"step {s.step_id} ({s.name} on {s.nodes})" for s in self.squeue_steps()]
        return jobs + steps

    def assert_no_jobs_left(self) -> None:
        left = self.leftovers()
        assert not left, f"SLURM jobs/steps still present: {'; '.join(left)}"

    def is_quiet(self) -> bool:
        """No job or step left and every node idle."""
        states = self.node_states()
        idle = bool(states) and all(s == "idle" for s in states.values())
        return idle and not self.leftovers()

    def wait_until_quiet(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_quiet():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def cancel_all(self) -> None:
        jobs = [j.job_id for j in self.squeue_jobs()]
        if jobs:
            self.run(["scancel", *jobs], timeout=15)

    def diagnostics(self) -> str:
        return cluster.diagnostics(self.state_dir)

    def record_timing(self, label: str, seconds: float) -> None:
        """Print a timing now (seen with -s) and list it in the terminal summary."""
        print(f"[slurm timing] {label}: {seconds:.3f} s")
        _TIMINGS.append((label, seconds))


# --------------------------------------------------------------------------- skipping


def must_not_skip(environ: Mapping[str, str]) -> bool:
    ci = environ.get("CI", "").strip().lower()
    return ci not in ("", "0", "false", "no") or environ.get(REQUIRE_ENV, "") == "1"


def skip_or_fail(reason: str, environ: Mapping[str, str]) -> None:
    if must_not_skip(environ):
        pytest.fail(f"SLURM tests cannot run: {reason}; CI/{REQUIRE_ENV} forbid skipping.",
                    pytrace=False)  # fmt: skip
    pytest.skip(f"{reason} (set {REQUIRE_ENV}=1 to make this a failure)")


# --------------------------------------------------------------------------- fixtures


def _start_for_session() -> tuple[SlurmTestCluster, bool]:
    """The cluster for this session, and whether this session started it."""
    current = cluster.status()
    if current.state == "up" and current.info is not None:
        print(f"Reusing the running SLURM test cluster in {current.info.state_dir}")
        return SlurmTestCluster(current.info), False
    reason = cluster.check_platform()
    if reason is not None:
        skip_or_fail(reason, os.environ)
    try:
        result = cluster.start()
    except cluster.ClusterError as exc:
        pytest.fail(f"The SLURM test cluster did not start: {exc}", pytrace=False)
    if not result.already_running:
        _TIMINGS.append(("cluster bring-up", result.seconds))
        print(f"SLURM test cluster brought up in {result.seconds:.2f} s")
    return SlurmTestCluster(result.info), not result.already_running


@pytest.fixture(scope="session")
def slurm_cluster_session() -> Iterator[SlurmTestCluster]:
    """The cluster, shared by the whole session; prefer the function-scoped slurm_cluster."""
    test_cluster, started_here = _start_for_session()
    yield test_cluster
    if not started_here or os.environ.get(KEEP_ENV, "") == "1":
        print(f"Leaving the SLURM test cluster running ({test_cluster.state_dir})")
        return
    began = time.monotonic()
    problems = cluster.stop(test_cluster.state_dir)
    _TIMINGS.append(("cluster tear-down", time.monotonic() - began))
    if problems:
        pytest.fail("SLURM test cluster tear-down left: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def slurm_cluster(
    slurm_cluster_session: SlurmTestCluster, request: pytest.FixtureRequest
) -> Iterator[SlurmTestCluster]:
    """The session's cluster; afterwards fails the test if it left jobs or busy nodes."""
    yield slurm_cluster_session
    failed = _call_failed(request.node)
    if failed:
        print("SLURM test cluster diagnostics:\n" + slurm_cluster_session.diagnostics())
    if slurm_cluster_session.wait_until_quiet(QUIET_GRACE):
        return
    complaint = _clean_up(slurm_cluster_session)
    if failed:
        print(complaint)
    else:
        pytest.fail(complaint, pytrace=False)


def _clean_up(test_cluster: SlurmTestCluster) -> str:
    left = test_cluster.leftovers()
    test_cluster.cancel_all()
    complaint = f"The test left SLURM jobs/steps behind (now scancelled): {'; '.join(left)}"
    if not left:
        complaint = "Nodes did not return to idle after the test"
    if not test_cluster.wait_until_quiet(CLEANUP_TIMEOUT):
        complaint += f"; still not idle after {CLEANUP_TIMEOUT:g} s: {test_cluster.node_states()}"
        complaint += "\n" + test_cluster.diagnostics()
    return complaint


def _call_failed(item: pytest.Item) -> bool:
    """Whether the test's setup or call failed (the reports the hook below kept)."""
    return any(report.failed for report in item.stash.get(_REPORTS, {}).values())


# --------------------------------------------------------------------------- hooks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item so fixtures can tell whether the test failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        terminalreporter.section("SLURM test cluster timings")
        for label, seconds in _TIMINGS:
            terminalreporter.write_line(f"{label}: {seconds:.3f} s")

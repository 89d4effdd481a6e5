"""pytest plugin: run Snakemake's own ``tests/tests.py`` with a chosen executor, police the
Dask processes of every test, and write one JSON record per test.

Loaded by ``scripts/snakemake_suite.py`` into a pytest that runs in the root of Snakemake's
unpacked sdist (``-p dask_slurm_run``, with this directory on ``PYTHONPATH``). Settings come
from the environment:

``SNAKEMAKE_SUITE_EXECUTOR``
    ``local`` (default): Snakemake's tests run unchanged, except that a ``cluster=`` call
    (cluster-generic with a ``qsub`` script that only runs the job script on this machine)
    runs with the local executor too, so that both passes run the same calls.
    ``dask-slurm``: every call of ``tests.common.run`` that would use the local executor
    (also the ``cluster=`` calls, and ``shellcmd=`` calls that run a workflow) uses the
    plugin in local mode instead (see :func:`switch_api_call` and :func:`switch_shellcmd`).
``SNAKEMAKE_SUITE_JOBS``
    ``--jobs``/``nodes`` given to the plugin (default 10).
``SNAKEMAKE_SUITE_RESULTS``
    Where to write the JSON results (one record per test id) at the end of the session.
``SNAKEMAKE_SUITE_TMP``
    A directory under which every test gets a temporary directory of its own (``TMPDIR``
    and ``tempfile.tempdir`` point there while it runs, so ``run()`` copies its workflow
    there). Default: pytest's base temporary directory.
``SNAKEMAKE_SUITE_LEFTOVER_WAIT``
    Seconds a test's Dask processes may take to end after the test (default 10).

After each test (both passes), a Dask scheduler, Dask worker or the plugin's supervisor
(``snakemake_executor_plugin_dask_slurm.worker.supervisor``) that the test started and that still
runs fails the test: it is killed and the test gets an error in its teardown, recorded as
``leftover`` in the JSON results. "Started by the test" means: the process's environment
holds the test's token (``SNAKEMAKE_SUITE_TEST_TOKEN``, set in ``os.environ`` for the
duration of the test, which every process the plugin or a Snakemake subprocess starts
inherits), or its working directory or command line lies under the test's temporary
directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EXECUTOR = os.environ.get("SNAKEMAKE_SUITE_EXECUTOR", "local")
JOBS = int(os.environ.get("SNAKEMAKE_SUITE_JOBS", "10"))
RESULTS = os.environ.get("SNAKEMAKE_SUITE_RESULTS", "")
LEFTOVER_WAIT = float(os.environ.get("SNAKEMAKE_SUITE_LEFTOVER_WAIT", "10"))
TOKEN_VAR = "SNAKEMAKE_SUITE_TEST_TOKEN"
#: Command-line fragments of every long-lived process kind the plugin starts.
DASK_MARKERS = ("distributed.cli.dask_scheduler", "distributed.cli.dask_worker")
#: The plugin's supervisor (``python -m snakemake_executor_plugin_dask_slurm[.worker].supervisor``,
#: one per worker), whichever subpackage it lives in.
SUPERVISOR = re.compile(r"snakemake_executor_plugin_dask_slurm(?:\.\w+)*\.(?:supervisor|zygote)\b")


def is_dask_process(cmd: str) -> bool:
    """Whether a command line is a Dask scheduler, worker, the plugin's supervisor or its
    warm process (whose servers and warm jobs, being forks, show its command line)."""
    return any(m in cmd for m in DASK_MARKERS) or SUPERVISOR.search(cmd) is not None


#: run() defaults (tests/common.py) that decide the executor.
DEFAULT_CORES = 3

# -- switching the executor --------------------------------------------------------------


def executor_settings(cores: int, run_dir: str) -> Any:
    """The plugin's settings for a test that gave Snakemake ``cores`` cores: the local
    cluster gets exactly that many CPUs, as the local executor would use (it
    oversubscribes a smaller machine too: test_threads runs a 20-thread job). The run
    directory (logs) is outside the workflow's directory, so that it survives run()'s
    clean-up and can be counted (:func:`dask_usage`). No usage report: it is the plugin's
    own page, tested by its own end-to-end tests (which all run with it on); here it would
    cost about a fifth of the pass (bokeh imported and a page written per run)."""
    from snakemake_executor_plugin_dask_slurm import ExecutorSettings

    return ExecutorSettings(
        cluster="local", cpus=max(1, int(cores)), run_dir=Path(run_dir), no_usage_report=True
    )


def switch_api_call(kwargs: dict[str, Any], run_dir: str) -> str:
    """Rewrite the keyword arguments of one in-process ``run()`` call for this pass;
    returns what was done (for the record). Calls that pick another executor (dryrun,
    touch) or run a subprocess (``shellcmd=``, see :func:`switch_shellcmd`) are left as
    they are."""
    if kwargs.get("shellcmd"):
        return switch_shellcmd(kwargs, run_dir)
    executor = kwargs.get("executor", "local")
    cluster = kwargs.get("cluster")
    if cluster is None and executor != "local":
        return f"unchanged ({executor})"
    if cluster is not None:
        # cluster-generic with Snakemake's test qsub script, which runs the job script on
        # this machine: the same jobs, run by this pass's executor (cluster-generic is
        # not a dependency of the plugin).
        kwargs.pop("cluster")
        kwargs.pop("cluster_status", None)
        nodes = kwargs.pop("nodes", None) or 3  # what run() sets for cluster=
        if EXECUTOR != "local":
            kwargs["nodes"] = nodes
        # (no nodes for the local executor: with nodes set, Snakemake's scheduler stops
        # limiting jobs by --cores, scheduling/job_scheduler.py:111-113)
    if EXECUTOR == "local":
        kwargs["executor"] = "local"
        return "local (was cluster-generic)" if cluster is not None else "local"
    kwargs["executor"] = "dask-slurm"
    # A non-local executor needs a job count (api.py: "maximum number of parallel
    # jobs/used nodes has to be specified"); run() defaults to nodes=None.
    kwargs["nodes"] = kwargs.get("nodes") or JOBS
    cores = kwargs.get("cores", DEFAULT_CORES) or DEFAULT_CORES
    kwargs.setdefault("executor_settings", executor_settings(cores, run_dir))
    # shared_fs_usage: run() already defaults to SharedFSUsage.all(), which the plugin needs
    return "dask-slurm" + (" (was cluster-generic)" if cluster is not None else "")


#: Options after which a shellcmd does not run a workflow (or runs it another way).
_NOT_A_RUN = {
    "--executor",
    "-e",
    "--cluster",
    "--profile",
    "--workflow-profile",
    "-n",
    "--dryrun",
    "--dry-run",
    "--touch",
    "-t",
    "--summary",
    "-S",
    "--detailed-summary",
    "-D",
    "--list",
    "-l",
    "--list-input-changes",
    "--list-params-changes",
    "--list-code-changes",
    "--list-untracked",
    "--generate-unit-tests",
    "--dag",
    "--rulegraph",
    "--filegraph",
    "--d3dag",
    "--containerize",
    "--archive",
    "--report",
    "--lint",
    "--unlock",
    "--cleanup-metadata",
    "--delete-all-output",
    "--delete-temp-output",
    "--conda-create-envs-only",
    "--sdm",
    "--software-deployment-method",
    "--use-conda",
    "--use-singularity",
    "--use-apptainer",
}


def _option_value(tokens: list[str], short: str, long: str) -> str | None:
    for i, tok in enumerate(tokens):
        if tok in (short, long) and i + 1 < len(tokens):
            return tokens[i + 1]
        if tok.startswith(long + "="):
            return tok.split("=", 1)[1]
        if tok.startswith(short) and len(tok) > len(short) and not tok.startswith("--"):
            return tok[len(short) :]
    return None


def switch_shellcmd(kwargs: dict[str, Any], run_dir: str) -> str:
    """A ``shellcmd="snakemake ..."`` call runs Snakemake as a subprocess: insert the
    plugin's options after ``snakemake`` when the command runs a workflow with the
    local executor (no other executor, profile, dry run, listing, report...)."""
    cmd = kwargs["shellcmd"]
    if EXECUTOR == "local":
        return "unchanged (subprocess)"
    try:
        tokens = shlex.split(cmd)
    except ValueError:
        return "unchanged (subprocess, unparsable)"
    if (
        not tokens
        or tokens[0] != "snakemake"
        or any(
            t.split("=", 1)[0] in _NOT_A_RUN or t in (">", "|") or t.startswith(">")
            for t in tokens[1:]
        )
    ):
        return "unchanged (subprocess)"
    jobs = _option_value(tokens, "-j", "--jobs")
    cores = _option_value(tokens, "-c", "--cores")
    cpus = next((v for v in (cores, jobs) if v is not None and v.isdigit()), str(DEFAULT_CORES))
    extra = ["--executor", "dask-slurm", "--dask-slurm-cluster", "local"]
    extra += ["--dask-slurm-cpus", cpus, "--dask-slurm-run-dir", run_dir]
    extra += ["--dask-slurm-no-usage-report"]  # see executor_settings
    if jobs is None:
        extra += ["--jobs", str(JOBS)]
    kwargs["shellcmd"] = "snakemake " + shlex.join(extra) + cmd[len("snakemake") :]
    return "dask-slurm (subprocess)"


#: Where the workers of one test's runs record each task they ran (the plugin's timing
#: hook, snakemake_executor_plugin_dask_slurm/worker/timing.py): a line per task.
TASKS_DIR = "dask-slurm-tasks"


def dask_usage(test_dir: str) -> tuple[int, int]:
    """(Dask clusters started, jobs run on them) by the switched calls of one test: a
    started cluster leaves logs/scheduler.log in its run directory, every task a worker
    ran a line in TASKS_DIR (the plugin starts its cluster lazily, so a run with nothing
    to do leaves neither; a job that succeeds silently leaves no job log to count)."""
    clusters = sum(
        (run_dir / "logs" / "scheduler.log").is_file()
        for run_dir in Path(test_dir).glob("dask-slurm-run-*")
    )
    jobs = sum(
        len(path.read_bytes().splitlines()) for path in (Path(test_dir) / TASKS_DIR).glob("*.tsv")
    )
    return clusters, jobs


# -- finding a test's Dask processes -----------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of a process; ("X", 0) if it is gone."""
    data = _read(f"/proc/{pid}/stat")
    try:
        fields = data.rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1])
    except (IndexError, ValueError):
        return "X", 0


def _ours(pid: int, needle: bytes, test_dir: str) -> str | None:
    """The command line of ``pid`` if it is a live Dask process of this test, "" if that
    cannot be told yet (a process in the middle of exec has no command line for a
    moment), else None."""
    state, ppid = _stat(pid)
    if state in ("Z", "X"):
        return None
    raw = _read(f"/proc/{pid}/cmdline")
    if not raw:
        # kernel threads (children of kthreadd, pid 2) never have one
        return None if pid == 2 or ppid in (0, 2) else ""
    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if not is_dask_process(cmd):
        return None
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    if (
        needle in _read(f"/proc/{pid}/environ").split(b"\0")
        or cwd == test_dir
        or cwd.startswith(test_dir + os.sep)
        or test_dir in cmd
    ):
        return cmd
    return None


def dask_processes(token: str, test_dir: str) -> list[tuple[int, str]]:
    """Live Dask scheduler/worker/supervisor processes started under this test."""
    me = os.getpid()
    needle = f"{TOKEN_VAR}={token}".encode()
    found: list[tuple[int, str]] = []
    unsure: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        cmd = _ours(int(entry), needle, test_dir)
        if cmd:
            found.append((int(entry), cmd))
        elif cmd == "":
            unsure.append(int(entry))
    deadline = time.monotonic() + 2
    while unsure and time.monotonic() < deadline:
        time.sleep(0.02)
        again = []
        for pid in unsure:
            cmd = _ours(pid, needle, test_dir)
            if cmd:
                found.append((pid, cmd))
            elif cmd == "":
                again.append(pid)
        unsure = again
    return found


def wait_gone(token: str, test_dir: str, timeout: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = dask_processes(token, test_dir)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def kill(procs: list[tuple[int, str]]) -> None:
    for pid, _ in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# -- per-test fixture and results ---------------------------------------------------------

_records: dict[str, dict[str, Any]] = {}


def _record(nodeid: str) -> dict[str, Any]:
    return _records.setdefault(
        nodeid,
        {"outcome": None, "duration": 0.0, "calls": [], "leftover": [], "message": ""},
    )


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])[:80]


@pytest.fixture(autouse=True)
def _snakemake_suite(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    base = os.environ.get("SNAKEMAKE_SUITE_TMP") or str(
        request.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    )
    test_dir = tempfile.mkdtemp(prefix=_safe_name(request.node.nodeid) + "-", dir=base)
    test_dir = os.path.realpath(test_dir)
    token = uuid.uuid4().hex
    record = _record(request.node.nodeid)
    record["tmp"] = test_dir

    monkeypatch.setenv(TOKEN_VAR, token)
    monkeypatch.setenv("DASK_SLURM_TIMING_TASKS", os.path.join(test_dir, TASKS_DIR))
    monkeypatch.setenv("TMPDIR", test_dir)
    monkeypatch.setattr(tempfile, "tempdir", test_dir)

    import tests.tests as suite

    original = suite.run

    @functools.wraps(original)
    def run(path: Any, *args: Any, **kwargs: Any) -> Any:
        run_dir = os.path.join(test_dir, f"dask-slurm-run-{len(record['calls'])}")
        how = switch_api_call(kwargs, run_dir)
        record["calls"].append(how)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(suite, "run", run)
    environ = dict(os.environ)
    cwd = os.getcwd()
    yield
    # Some tests change os.environ (test_profile_with_env_var sets SNAKEMAKE_PROFILE) or
    # the working directory and leave them so: every test starts from the same state.
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)
    if os.getcwd() != cwd:
        os.chdir(cwd)
    monkeypatch.undo()
    record["dask_clusters"], record["dask_jobs"] = dask_usage(test_dir)
    left = wait_gone(token, test_dir, LEFTOVER_WAIT)
    if left:
        kill(left)
        record["leftover"] = [f"{pid}: {cmd}" for pid, cmd in left]
        pytest.fail(
            f"{len(left)} Dask process(es) outlived the test (killed now): "
            + "; ".join(record["leftover"]),
            pytrace=False,
        )


def _outcome(phases: dict[str, str]) -> str:
    """One outcome from the setup/call/teardown outcomes (a failed setup or teardown is
    an error, as pytest counts it)."""
    setup, call, teardown = (phases.get(w, "") for w in ("setup", "call", "teardown"))
    if setup == "failed":
        return "error"
    if setup == "skipped":
        return "skipped"
    if call in ("failed", "xpassed", "xfailed", "skipped"):
        return call
    if teardown == "failed":
        return "error"
    return call or "error"


#: Lines of Snakemake's output that say why a job failed (the plugin's messages included).
_WHY = re.compile(r"^\s*(?:message: (?!None\b|Error in group)(.+)|(Error in group \S+: .+))$")


def failure_summary(text: str, sections: dict[str, str]) -> str:
    """One line on why a test failed: the exception (or a timeout), then the first job
    error message Snakemake printed, if any."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "Timeout (>" in ln:
            return "timeout: " + ln.strip("+ ")
    errors = [ln[1:].strip() for ln in lines if re.match(r"^E\s+\S*\w", ln)]
    summary = next(
        (e for e in errors if re.search(r"Error|Exception|assert|Failed", e)),
        errors[-1] if errors else (lines[-1] if lines else ""),
    )
    for name, out in sections.items():
        if not name.startswith("Captured"):
            continue
        for ln in out.splitlines():
            m = _WHY.match(ln)
            if m:
                return f"{summary[:150]} -- {(m.group(1) or m.group(2)).strip()[:250]}"
    return summary


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    record = _record(report.nodeid)
    record["duration"] += report.duration
    outcome: str = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    phases = record.setdefault("phases", {})
    phases[report.when] = outcome
    record["outcome"] = _outcome(phases)
    if outcome in ("failed", "skipped") and report.longrepr is not None:
        text = report.longreprtext
        if outcome == "skipped" and isinstance(report.longrepr, tuple):
            text = str(report.longrepr[2])
        summary = failure_summary(text, dict(report.sections))
        if "Timeout (>" in text:
            record["timeout"] = True
        note = f"{report.when}: {summary.strip()[:300]}"
        record["message"] = f"{record['message']} | {note}" if record["message"] else note


_exitstatus = [0]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exitstatus[0] = int(exitstatus)
    if not RESULTS:
        return
    import snakemake

    Path(RESULTS).write_text(
        json.dumps(
            {
                "executor": EXECUTOR,
                "snakemake": snakemake.__version__,
                "exitstatus": int(exitstatus),
                "tests": _records,
            },
            indent=1,
        )
    )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the session even if a test left a non-daemon thread behind. A test stopped by
    its time limit may leave one waiting forever (test_queue_input's Snakefile starts a
    thread that ends only once Snakemake consumed its queue), and the interpreter would
    wait for it at exit: the results are written by now, so exit without waiting."""
    alive = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and t.is_alive() and not t.daemon
    ]
    if alive:
        names = ", ".join(sorted(t.name for t in alive))
        print(f"dask_slurm_run: exiting despite {len(alive)} thread(s) still running: {names}")
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exitstatus[0])

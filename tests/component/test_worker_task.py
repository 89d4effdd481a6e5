"""The worker side, with real processes (no Dask needed to run a TaskSpec)."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.worker import preload, running
from snakemake_executor_plugin_dask_slurm.worker import task as worker_task
from snakemake_executor_plugin_dask_slurm.worker.job_log import keep_log
from snakemake_executor_plugin_dask_slurm.worker.running import JOBS, SCANS_AFTER_AN_END
from snakemake_executor_plugin_dask_slurm.worker.supervisor import (
    RECORD_DIR_VARIABLE,
    take_running_keys,
)
from snakemake_executor_plugin_dask_slurm.worker.task import (
    kill_tasks,
    read_tail,
    run_task,
    running_tasks,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import (
    SYSTEM_TMPDIR,
    JobFailed,
    TaskSpec,
    TooLate,
)
from tests.waiting import eventually


@pytest.fixture(autouse=True)
def fresh_worker_state() -> Iterator[None]:
    # Module state of one worker process; each test plays a fresh worker. The in-process
    # workers of other tests share it: no landing point is left behind.
    JOBS.stopped.clear()
    JOBS.newly_started.clear()
    JOBS.landing_at = None
    JOBS.closing = False
    JOBS.failed_at.clear()
    yield
    JOBS.landing_at = None
    JOBS.closing = False
    JOBS.failed_at.clear()


def spec(tmp_path: Path, script: str, key: str = "k1", tmpdir: str | None = None) -> TaskSpec:
    return TaskSpec(
        key=key,
        argv=("/bin/bash", "-c", script),
        cwd=str(tmp_path),
        env=(("EXTRA", "value with space"),),
        log_path=str(tmp_path / "logs" / f"{key}.log"),
        tmpdir=tmpdir,
    )


def test_success_runs_in_cwd_with_env_and_logs_both_streams(tmp_path: Path) -> None:
    outcome = run_task(spec(tmp_path, 'echo "$EXTRA"; pwd; echo err >&2', tmpdir=SYSTEM_TMPDIR))
    assert outcome.returncode == 0 and outcome.tail == "" and outcome.start_error is None
    assert outcome.finished >= outcome.started
    log = (tmp_path / "logs/k1.log").read_text()
    assert log == f"value with space\n{tmp_path}\nerr\n"


def test_tmpdir_variables_point_at_the_workers_temporary_directory(tmp_path: Path) -> None:
    import tempfile

    run_task(spec(tmp_path, 'echo "$TMPDIR $TMP $TEMP $TEMPDIR"', tmpdir=SYSTEM_TMPDIR))
    tmp = tempfile.gettempdir()
    assert (tmp_path / "logs/k1.log").read_text() == f"{tmp} {tmp} {tmp} {tmp}\n"


def test_an_explicit_tmpdir_is_created_and_used(tmp_path: Path) -> None:
    target = tmp_path / "scratch" / "job"
    run_task(spec(tmp_path, 'echo "$TMPDIR"', tmpdir=str(target)))
    assert target.is_dir()
    assert (tmp_path / "logs/k1.log").read_text() == f"{target}\n"


def test_without_tmpdir_the_variables_are_left_alone(tmp_path: Path) -> None:
    run_task(spec(tmp_path, 'echo "${TMPDIR-unset}"'))
    assert (tmp_path / "logs/k1.log").read_text() == os.environ.get("TMPDIR", "unset") + "\n"


def test_a_stopped_task_that_had_not_started_never_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert kill_tasks(["queued"]) == []
    with pytest.raises(JobFailed) as failed:
        run_task(spec(tmp_path, f"touch {marker}", key="queued"))
    assert failed.value.outcome.start_error == "it was stopped before it started"
    assert not marker.exists()


def test_failure_raises_with_code_and_last_lines(tmp_path: Path) -> None:
    with pytest.raises(JobFailed) as failed:
        run_task(spec(tmp_path, "for i in $(seq 1 50); do echo l$i; done; exit 4"))
    outcome = failed.value.outcome
    assert outcome.returncode == 4
    assert pickle.loads(pickle.dumps(failed.value)).outcome == outcome  # crosses to the client
    assert outcome.tail.splitlines() == [f"l{i}" for i in range(31, 51)]


def test_unstartable_command_is_reported_not_raised(tmp_path: Path) -> None:
    bad = TaskSpec("k", ("/no/such/shell",), str(tmp_path), (), str(tmp_path / "l.log"), None)
    with pytest.raises(JobFailed) as failed:
        run_task(bad)
    outcome = failed.value.outcome
    assert outcome.returncode == -1
    assert outcome.start_error is not None and "FileNotFoundError" in outcome.start_error


def test_kill_tasks_stops_the_whole_process_group(tmp_path: Path) -> None:
    # The job starts a grandchild that would outlive a plain kill of the shell.
    marker = tmp_path / "grandchild.pid"
    script = f"{sys.executable} -c 'import time; time.sleep(60)' & echo $! > {marker}; wait"
    result: list[worker_task.TaskOutcome] = []
    thread = threading.Thread(target=lambda: result.append(run_outcome(spec(tmp_path, script))))
    thread.start()
    eventually("k1 running", lambda: marker.exists() and "k1" in running_tasks(), 10, 0.02)
    grandchild = int(marker.read_text())
    assert kill_tasks(["k1", "other"], grace=0.5) == ["k1"]
    thread.join(10)
    assert result and result[0].returncode == -15
    eventually("the grandchild killed", lambda: not _alive(grandchild), 5)
    assert running_tasks() == []


def run_outcome(task: TaskSpec) -> worker_task.TaskOutcome:
    try:
        return run_task(task)
    except JobFailed as e:
        return e.outcome


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_module_dask_preloads_in_every_worker_has_the_workers_hooks() -> None:
    import importlib

    from snakemake_executor_plugin_dask_slurm.worker import TASK_MODULE

    module = importlib.import_module(TASK_MODULE)  # what clusters/spec.py gives --preload
    assert module.dask_setup is preload.dask_setup
    assert module.dask_teardown is preload.dask_teardown


def test_dask_teardown_kills_running_jobs(tmp_path: Path) -> None:
    result: list[worker_task.TaskOutcome] = []
    thread = threading.Thread(
        target=lambda: result.append(run_outcome(spec(tmp_path, "exec sleep 60", key="t")))
    )
    thread.start()
    eventually("t running", lambda: "t" in running_tasks(), 10, interval=0.02)
    worker_task.dask_teardown(worker=None)
    thread.join(10)
    assert result[0].returncode == -15


def test_a_closing_worker_names_the_jobs_that_ended_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scancel signals a worker job's every process at once: a job may end before its
    worker's teardown, its outcome never sent. The worker's note for its supervisor still
    names it (it was running when the worker died), whether the signal killed it or it
    exited on it (a job's Snakemake exits 1), with those still running at the teardown;
    not one that failed long before, succeeded, or was stopped by the plugin. A job the
    signal killed holds its slot a moment: a worker being ended with it starts no other
    job meanwhile."""
    records = tmp_path / "records"
    monkeypatch.setenv(RECORD_DIR_VARIABLE, str(records))
    assert run_outcome(spec(tmp_path, "exit 3", key="long-ago")).returncode == 3
    JOBS.failed_at["long-ago"] -= running.FAILED_LATELY_SECONDS + 1  # it failed long ago
    assert run_outcome(spec(tmp_path, "true", key="succeeded")).returncode == 0
    scripts = {
        "cancelled": "echo $$ > cancelled.pid; exec sleep 60",
        "graceful": "trap 'exit 1' TERM; echo $$ > graceful.pid; sleep 60 & wait",
        "stopped": "echo $$ > stopped.pid; exec sleep 60",
        "at-close": "echo $$ > at-close.pid; exec sleep 60",
    }
    ended: dict[str, tuple[worker_task.TaskOutcome, float]] = {}

    def run(key: str) -> None:
        outcome = run_outcome(spec(tmp_path, scripts[key], key=key))
        ended[key] = outcome, time.monotonic()

    threads = {key: threading.Thread(target=run, args=(key,)) for key in scripts}
    for thread in threads.values():
        thread.start()
    pids = {key: tmp_path / f"{key}.pid" for key in scripts}
    eventually(
        "the jobs running",
        lambda: (
            set(running_tasks()) == set(scripts)
            and all(p.exists() and p.read_text().strip() for p in pids.values())
        ),
        10,
    )
    assert kill_tasks(["stopped"], grace=0.5) == ["stopped"]
    threads["stopped"].join(10)
    killed = time.monotonic()
    for key in ("cancelled", "graceful"):
        os.kill(int(pids[key].read_text()), signal.SIGTERM)  # as SLURM's cancel does
    time.sleep(0.2)
    assert "cancelled" in running_tasks()  # it holds its slot
    for key in ("cancelled", "graceful"):
        threads[key].join(10)
    assert ended["cancelled"][0].returncode == -15 and ended["graceful"][0].returncode == 1
    assert ended["cancelled"][1] - killed >= running.OUTSIDE_KILL_PAUSE
    assert running_tasks() == ["at-close"]
    worker_task.dask_teardown(worker=types.SimpleNamespace(name="w1"))
    threads["at-close"].join(10)
    assert ended["at-close"][0].returncode == -15
    noted = take_running_keys(records, "w1", os.getpid())
    assert noted == ["at-close", "cancelled", "graceful"], noted


def test_read_tail(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\nb\n\xff\nc\n")
    assert read_tail(str(path), 2) == "\ufffd\nc"
    assert read_tail(str(tmp_path / "missing")) == ""
    assert os.path.exists(path)


EXIT_WITHOUT_TEARDOWN = """
import sys, threading
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from snakemake_executor_plugin_dask_slurm.worker.task import run_task
spec = TaskSpec("t", ("/bin/bash", "-c", "echo $$ > pid; exec sleep 60"), sys.argv[1], (),
                sys.argv[1] + "/t.log", None)
threading.Thread(target=run_task, args=(spec,), daemon=True).start()
for _ in range(200):
    import os, time
    if os.path.exists("pid") and open("pid").read().strip():
        break
    time.sleep(0.05)
sys.exit(0)  # as a worker whose close a signal cut short: no dask_teardown
"""


def test_a_worker_exiting_without_teardown_takes_its_jobs_along(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITHOUT_TEARDOWN, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    pid = int((tmp_path / "pid").read_text())
    try:
        eventually("the job ended with its worker's exit", lambda: not _alive(pid), 5)
    except AssertionError:
        os.kill(pid, 9)
        raise


class EventLog:
    """What a Dask worker's ``log_event`` was given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def log_event(self, topic: str, msg: object) -> None:
        self.events.append((topic, msg))


def test_a_worker_reports_which_jobs_it_started_once_a_second_at_most(tmp_path: Path) -> None:
    worker = EventLog()
    preload.report_started(worker)  # nothing new: nothing said
    for key in ("r1", "r2"):
        run_task(spec(tmp_path, "true", key=key))
    preload.report_started(worker)
    preload.report_started(worker)  # said once
    assert worker.events == [(preload.STARTED_TOPIC, ["r1", "r2"])]


def test_withdraw_keeps_what_runs_and_stops_the_rest_from_starting(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result: list[object] = []
    slow = spec(tmp_path, f"touch {marker}; sleep 30", key="runs")
    thread = threading.Thread(target=lambda: result.append(run_outcome(slow)))
    thread.start()
    eventually("the job running", marker.exists, 10, 0.02)
    running = worker_task.withdraw_tasks(["runs", "queued"])
    assert list(running) == ["runs"] and running["runs"] > 0
    with pytest.raises(JobFailed) as caught:
        run_task(spec(tmp_path, "touch never", key="queued"))
    assert caught.value.outcome.start_error == "it was stopped before it started"
    assert not (tmp_path / "never").exists()
    kill_tasks(["runs"], grace=0.5)
    thread.join(10)


def test_a_worker_starts_no_job_that_cannot_finish_before_its_landing_point(
    tmp_path: Path,
) -> None:
    JOBS.landing_at = time.time() + 5.0
    marker = tmp_path / "ran"
    late = dataclasses.replace(spec(tmp_path, f"touch {marker}", key="late"), needs=10.0)
    with pytest.raises(TooLate) as caught:
        run_task(late)
    assert str(caught.value).startswith("not started: it needs about 10 s with the margin, ")
    assert not marker.exists() and worker_task.running_tasks() == []
    assert run_task(dataclasses.replace(late, needs=1.0)).returncode == 0  # fits
    assert run_task(dataclasses.replace(late, needs=None)).returncode == 0  # unknown: fits
    JOBS.landing_at = time.time() - 1.0  # landed: nothing starts
    with pytest.raises(TooLate, match="its worker reached its landing point"):
        run_task(dataclasses.replace(late, needs=None))


def test_a_silent_success_leaves_no_log_a_silent_failure_an_empty_one(tmp_path: Path) -> None:
    run_task(spec(tmp_path, "true", key="quiet"))
    assert not (tmp_path / "logs").exists()  # no file, not even its directory
    with pytest.raises(JobFailed) as failed:
        run_task(spec(tmp_path, "exit 2", key="quietfail"))
    assert failed.value.outcome.tail == ""
    assert (tmp_path / "logs/quietfail.log").read_bytes() == b""


def test_the_log_grows_while_the_job_runs(tmp_path: Path) -> None:
    log, go = tmp_path / "logs/k1.log", tmp_path / "go"
    script = f"echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo second"
    thread = threading.Thread(target=run_task, args=(spec(tmp_path, script),))
    thread.start()
    deadline = time.monotonic() + 10
    while not (log.exists() and log.read_text() == "first\n"):
        assert time.monotonic() < deadline, "the first line did not reach the log"
        time.sleep(0.02)
    go.touch()
    thread.join(10)
    assert log.read_text() == "first\nsecond\n"


def test_much_output_arrives_whole_and_in_order(tmp_path: Path) -> None:
    script = "seq 1 200000; seq 1 5 >&2"  # 1.3 MB, 20 pipe buffers
    run_task(spec(tmp_path, script))
    lines = (tmp_path / "logs/k1.log").read_text().splitlines()
    assert lines == [str(i) for i in range(1, 200001)] + ["1", "2", "3", "4", "5"]


def test_a_background_child_holding_the_output_does_not_hold_the_job(tmp_path: Path) -> None:
    # As before the log was a pipe: the job ends with its shell, and what it left in its
    # process group is killed with it.
    marker = tmp_path / "child.pid"
    begin = time.monotonic()
    run_task(spec(tmp_path, f"sleep 30 & echo $! > {marker}; echo started"))
    assert time.monotonic() - begin < 5
    assert (tmp_path / "logs/k1.log").read_text() == "started\n"
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, "the background child outlived its job"
        time.sleep(0.05)


def test_an_unwritable_log_does_not_block_the_job_and_a_failure_says_so(tmp_path: Path) -> None:
    (tmp_path / "logs").write_text("a file where the log directory should be")
    out = tmp_path / "out.txt"
    run_task(spec(tmp_path, f"seq 1 100000; echo done > {out}"))  # more than a pipe holds
    assert out.read_text() == "done\n"
    with pytest.raises(JobFailed) as failed:
        run_task(spec(tmp_path, "echo oops; exit 1", key="k2"))
    assert failed.value.outcome.tail.startswith(
        f"(its log {tmp_path}/logs/k2.log could not be written: FileExistsError"
    )


def test_keep_log_creates_a_missing_log_and_keeps_a_written_one(tmp_path: Path) -> None:
    missing, written = tmp_path / "a/b/x.log", tmp_path / "y.log"
    written.write_text("kept\n")
    keep_log(str(missing))
    keep_log(str(written))
    assert missing.read_bytes() == b"" and written.read_text() == "kept\n"


def test_a_job_that_prints_is_still_measured_by_the_kernel(tmp_path: Path) -> None:
    # The output is copied while the job runs, without reaping it: os.wait4 still gets
    # the job's CPU time (the usage report's figures).
    script = "echo start; python3 -c 'x = 0\nfor i in range(3_000_000): x += i'; echo end"
    outcome, usage = worker_task.run_measured(spec(tmp_path, script))
    assert outcome.returncode == 0
    assert usage is not None and usage.cpu > 0.05, usage
    assert (tmp_path / "logs/k1.log").read_text() == "start\nend\n"


def _voluntary_switches(tid: int) -> int:
    """How often the thread ``tid`` of this process went to sleep (each wake-up is one)."""
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    (line,) = (x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds here")
def test_a_quiet_job_does_not_wake_the_thread_that_waits_for_it(tmp_path: Path) -> None:
    # The thread sleeps in one poll on the output and the shell's pidfd (issue 31): it
    # woke ten times a second before, looking at the shell.
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        run_task(spec(tmp_path, "sleep 1.6; echo done"))

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.4)
    before = _voluntary_switches(tid[0])
    time.sleep(1.0)
    woken = _voluntary_switches(tid[0]) - before
    thread.join(10)
    assert woken <= 2, f"the waiting thread woke {woken} times in a second"
    assert (tmp_path / "logs/k1.log").read_text() == "done\n"


@pytest.fixture
def no_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel or Python without pidfds: the output is copied with a look at the shell
    every OUTPUT_POLL_SECONDS, as before issue 31."""
    monkeypatch.delattr(os, "pidfd_open", raising=False)


@pytest.mark.usefixtures("no_pidfds")
def test_without_pidfds_the_log_and_the_end_are_as_with_them(tmp_path: Path) -> None:
    run_task(spec(tmp_path, "seq 1 100000; echo end >&2", key="much"))
    lines = (tmp_path / "logs/much.log").read_text().splitlines()
    assert lines == [str(i) for i in range(1, 100001)] + ["end"]
    begin = time.monotonic()
    run_task(spec(tmp_path, "sleep 30 & echo started", key="bg"))
    assert time.monotonic() - begin < 5
    assert (tmp_path / "logs/bg.log").read_text() == "started\n"
    run_task(spec(tmp_path, "true", key="quiet"))
    assert not (tmp_path / "logs/quiet.log").exists()


def test_a_job_reaped_under_its_waiter_still_ends_its_task(tmp_path: Path) -> None:
    # Another thread (the kill's poll(), a teardown) may reap the shell first: the pidfd
    # of a reaped process is readable too, and the task ends with Popen's returncode.
    from snakemake_executor_plugin_dask_slurm.worker import job_log

    procs: list[object] = []
    real = job_log.copy_output

    def reap_first(pid: int, output: object, log: job_log.JobLog) -> None:
        os.waitpid(pid, 0)  # as Popen.poll() would, before the copy begins
        real(pid, output, log)  # type: ignore[arg-type]
        procs.append(pid)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(worker_task, "copy_output", reap_first)
        begin = time.monotonic()
        outcome, usage = worker_task.run_measured(spec(tmp_path, "sleep 0.2"))
    assert time.monotonic() - begin < 5 and procs
    assert outcome.returncode == 0 and usage is None  # reaped elsewhere: no figures


def test_the_housekeeping_reports_starts_when_jobs_start_and_sleeps_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preload, "ORPHAN_SCAN_INTERVAL", 0.1)
    scans: list[float] = []
    monkeypatch.setattr(preload, "end_orphans", lambda: scans.append(time.monotonic()))
    worker, stop = EventLog(), threading.Event()
    JOBS.chores.clear()
    monkeypatch.setattr(JOBS, "scans_due", 0)  # what the other tests' jobs left
    args = (worker, stop, True)
    thread = threading.Thread(target=preload.housekeeping, args=args, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        assert worker.events == [] and scans == []  # nothing happened: nothing done
        run_task(spec(tmp_path, "true", key="h1"))
        eventually("the start reported", lambda: worker.events != [], 5, 0.02)
        assert worker.events == [(preload.STARTED_TOPIC, ["h1"])]
        eventually("two looks for its daemons", lambda: len(scans) >= 2, 5, 0.02)
        time.sleep(0.5)
        assert len(scans) == SCANS_AFTER_AN_END
    finally:
        stop.set()
        JOBS.chores.set()
        thread.join(5)


def test_pidfds_are_given_back_and_beyond_their_budget_jobs_run_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One pidfd per job beside its pipe: at most a quarter of the open-file limit, so that
    # a worker under a soft limit of 1,024 never fails to start a job for want of one.
    from snakemake_executor_plugin_dask_slurm.worker import job_log

    run_task(spec(tmp_path, "echo one", key="p1"))
    with pytest.raises(JobFailed):
        run_task(spec(tmp_path, "exit 3", key="p2"))
    assert job_log._pidfds == 0
    monkeypatch.setattr(job_log, "_pidfd_budget", lambda: 0)
    run_task(spec(tmp_path, "sleep 30 & echo two", key="p3"))
    assert (tmp_path / "logs/p1.log").read_text() == "one\n"
    assert (tmp_path / "logs/p3.log").read_text() == "two\n"
    assert job_log._pidfds == 0


def test_a_job_whose_event_cannot_be_written_still_sends_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_and_report``: writing the event's parts (here the usage's wire form) fails
    after the job ran; an event still goes (without one the job waits for ever)."""
    import distributed

    from snakemake_executor_plugin_dask_slurm.worker.wire import Usage

    worker = EventLog()
    worker.name = "w1"  # type: ignore[attr-defined]
    monkeypatch.setattr(distributed, "get_worker", lambda: worker)

    def broken(self: Usage) -> list[object]:
        raise ValueError("no wire form")

    monkeypatch.setattr(Usage, "to_wire", broken)
    worker_task.run_and_report(spec(tmp_path, "true", key="unwritable"))
    [(topic, msg)] = worker.events
    assert topic == worker_task.EVENT_TOPIC
    assert msg == {
        "key": "unwritable", "ok": False, "problem": "ValueError: no wire form",
        "worker_name": "w1", "worker_pid": os.getpid(),
    }  # fmt: skip

"""The dispatcher against a real (in-process) Dask scheduler and worker."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from distributed.client import ClosedClientError

from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import Dispatcher, SubmitFailed
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.waiting import eventually


def spec(tmp_path: Path, key: str, script: str) -> TaskSpec:
    return TaskSpec(
        key, ("/bin/bash", "-c", script), str(tmp_path), (), str(tmp_path / f"{key}.log"), None
    )


def wait_for(dispatcher: Dispatcher, count: int, woken: threading.Event) -> list[Finished]:
    results: list[Finished] = []

    def drained() -> bool:
        woken.wait(1)
        woken.clear()
        results.extend(dispatcher.drain())
        return len(results) >= count

    eventually(f"{count} tasks finished", drained, 30, interval=0)
    return sorted(results, key=lambda f: f.key)


def test_success_failure_and_wakeups(client: Client, tmp_path: Path) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    dispatcher.submit_many([(spec(tmp_path, "ok-1", "echo fine"), {"cpus": 1})])
    dispatcher.submit_many([(spec(tmp_path, "bad-1", "echo oops; exit 5"), {"cpus": 1})])
    ok, bad = sorted(wait_for(dispatcher, 2, woken), key=lambda f: f.key != "ok-1")
    assert ok == Finished("ok-1", True, seconds=ok.seconds, usage=ok.usage)
    assert ok.seconds is not None and 0 <= ok.seconds < 10  # how long it ran, for walltime
    assert not bad.ok and bad.outcome is not None
    assert (bad.outcome.returncode, bad.outcome.tail) == (5, "oops")
    # What each used came with its outcome event, success or failure (the report's figures).
    worker = next(iter(client.scheduler_info()["workers"].values()))["name"]
    for done in (ok, bad):
        assert done.usage is not None and done.usage.worker == str(worker)
        assert 0 < done.usage.wall < 10 and done.usage.cpu >= 0 and done.usage.max_rss_kb > 0
    assert bad.usage is not None and bad.usage.started == bad.outcome.started
    assert dispatcher.drain() == []


def restrictions(client: Client, keys: set[str]) -> dict[str, dict[str, float]]:
    """The resource restrictions of these tasks on the scheduler, once all are there (they
    must not have finished: Dask forgets a finished task at once, see dispatch)."""

    def read(dask_scheduler: Any) -> dict[str, dict[str, float]]:
        return {
            str(key): dict(ts.resource_restrictions or {})
            for key, ts in dask_scheduler.tasks.items()
            if str(key) in keys
        }

    def all_there() -> dict[str, dict[str, float]] | None:
        found = client.run_on_scheduler(read)
        return found if len(found) >= len(keys) else None

    return eventually("every task on the scheduler", all_there, 30, interval=0.02)


class RefusesSecondMap:
    """The real client, except that its second ``map`` is refused (as by a client that
    lost its scheduler in between)."""

    def __init__(self, client: Client):
        self.client = client
        self.maps = 0

    def map(self, *args: Any, **kwargs: Any) -> Any:
        self.maps += 1
        if self.maps == 2:
            raise ClosedClientError("Client is closed.")
        return self.client.map(*args, **kwargs)


def test_submit_many_names_the_jobs_dask_did_not_take(client: Client, tmp_path: Path) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    refusing = RefusesSecondMap(client)
    dispatcher.client = refusing  # type: ignore[assignment]
    tasks = [
        (spec(tmp_path, "one-0", "echo 0 > one-0.out"), {"cpus": 1}),
        (spec(tmp_path, "two-0", "true"), {"cpus": 2}),
        (spec(tmp_path, "two-1", "true"), {"cpus": 2}),
    ]
    with pytest.raises(SubmitFailed) as failed:
        dispatcher.submit_many(tasks)
    assert failed.value.keys == ["two-0", "two-1"]
    assert "ClosedClientError: Client is closed." in str(failed.value)
    (done,) = wait_for(dispatcher, 1, woken)
    assert (done.key, done.ok) == ("one-0", True)
    assert (tmp_path / "one-0.out").read_text() == "0\n"


def test_submit_many_groups_by_request_and_reports_every_job(
    client: Client, tmp_path: Path
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    wait = "while [ ! -e go ]; do sleep 0.02; done; "  # they stay on the scheduler till then
    small = [
        (spec(tmp_path, f"small-{i}", f"{wait}echo {i} > small-{i}.out"), {"cpus": 1})
        for i in range(5)
    ]
    big = [(spec(tmp_path, "big-0", f"{wait}echo $((2+2)) > big-0.out; exit 4"), {"cpus": 4})]
    dispatcher.submit_many(small[:2] + big + small[2:])
    keys = {"big-0"} | {f"small-{i}" for i in range(5)}
    assert restrictions(client, keys) == {"big-0": {"cpus": 4}} | {
        f"small-{i}": {"cpus": 1} for i in range(5)
    }
    (tmp_path / "go").touch()
    results = wait_for(dispatcher, 6, woken)
    assert [r.key for r in results] == ["big-0"] + [f"small-{i}" for i in range(5)]
    assert [r.ok for r in results] == [False] + [True] * 5
    assert results[0].outcome is not None and results[0].outcome.returncode == 4
    for i in range(5):
        assert (tmp_path / f"small-{i}.out").read_text() == f"{i}\n"
    assert (tmp_path / "big-0.out").read_text() == "4\n"
    assert dispatcher.drain() == []


def test_stop_kills_running_and_never_starts_queued_jobs(client: Client, tmp_path: Path) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    keys = [f"long-{i}" for i in range(6)]  # 4 CPUs: 4 run, 2 wait on the worker
    for key in keys:
        dispatcher.submit_many(
            [(spec(tmp_path, key, f"touch {key}.started; sleep 60"), {"cpus": 1})]
        )
    eventually("4 jobs started", lambda: len(list(tmp_path.glob("*.started"))) >= 4, 30)
    started = time.monotonic()
    dispatcher.stop(keys)
    results = wait_for(dispatcher, 6, woken)
    assert time.monotonic() - started < 15
    killed = [r for r in results if r.outcome and r.outcome.returncode == -15]
    # A queued job either reaches its turn and refuses to start, or is cancelled once
    # the killed ones have ended; it never runs.
    never = [
        r
        for r in results
        if (r.outcome and r.outcome.start_error == "it was stopped before it started")
        or (r.problem or "").startswith("its Dask task was cancelled")
    ]
    assert (len(killed), len(never)) == (4, 2), results
    assert len(list(tmp_path.glob("*.started"))) == 4


def test_stop_does_not_wait_for_tasks_no_worker_can_run(client: Client, tmp_path: Path) -> None:
    """As after a broken cluster: nothing runs them, so nothing will ever answer for them."""
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    keys = [f"stranded-{i}" for i in range(3)]
    for key in keys:  # no worker has a GPU: they wait for one forever
        dispatcher.submit_many([(spec(tmp_path, key, f"touch {key}.started"), {"gpus": 1})])
    started = time.monotonic()
    dispatcher.stop(keys)
    results = wait_for(dispatcher, 3, woken)
    assert time.monotonic() - started < 4, "stop waited out the kill's grace period (5 s)"
    assert all((r.problem or "").startswith("its Dask task was cancelled") for r in results)
    assert not list(tmp_path.glob("*.started"))


def test_a_silent_workers_removal_and_late_outcomes_of_its_jobs(
    client: Client, tmp_path: Path
) -> None:
    """The scheduler removes a worker for silence (its stimulus says worker-ttl); then the
    outcomes of its jobs arrive after all: a success counts, a failure says it ran."""
    woken = threading.Event()
    removed: list[tuple[WorkerRef, bool]] = []
    dispatcher = Dispatcher(client, woken.set, lambda w, silent: removed.append((w, silent)))
    # tasks no worker can run (a resource nobody has): they stay pending
    dispatcher.submit_many([(spec(tmp_path, k, "true"), {"nodes": 1}) for k in ("a", "b")])
    event = {
        "action": "remove-worker", "worker": "tls://10.0.0.2:4000", "expected": False,
        "processing-tasks": ["a", "b"], "stimulus_id": "check-worker-ttl-1764600000.0",
    }  # fmt: skip
    dispatcher._on_scheduler_event((0.0, event))
    assert removed == [(WorkerRef("tls://10.0.0.2:4000", None), True)]
    lost = dispatcher.drain()
    assert [(f.key, f.ok, f.problem) for f in lost] == [
        ("a", False, "its Dask worker tls://10.0.0.2:4000 stopped answering"),
        ("b", False, "its Dask worker tls://10.0.0.2:4000 stopped answering"),
    ]
    outcome = {"returncode": -15, "host": "n2", "started": 1.0, "finished": 2.0, "tail": ""}
    dispatcher._on_job_event((0.0, {"key": "a", "ok": True, "seconds": 1.0}))
    dispatcher._on_job_event((0.0, {"key": "b", "ok": False, "outcome": outcome}))
    dispatcher._on_job_event((0.0, {"key": "c", "ok": True, "seconds": 1.0}))  # never ours
    assert [(f.key, f.ok) for f in dispatcher.drain()] == [("a", True)]
    assert dispatcher.ran("a") and dispatcher.ran("b") and not dispatcher.ran("c")
    dispatcher.cancel(["a", "b"])


def test_withdraw_takes_back_what_has_not_started_and_leaves_what_runs(
    client: Client, tmp_path: Path
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    keys = [f"w-{i}" for i in range(6)]  # 4 CPUs: 4 run, 2 wait on the worker
    dispatcher.submit_many(
        [(spec(tmp_path, k, f"touch {k}.started; sleep 3"), {"cpus": 1}) for k in keys]
    )
    eventually("4 jobs started", lambda: len(list(tmp_path.glob("*.started"))) == 4, 30)
    asked = time.time()
    running = dispatcher.withdraw(keys)
    assert running is not None and len(running) == 4
    assert all(asked - 30 < began <= asked for began in running.values()), running
    waiting = sorted(set(keys) - set(running))
    taken = wait_for(dispatcher, 2, woken)
    assert [(f.key, f.problem) for f in taken] == [
        (k, "withdrawn before it started") for k in waiting
    ]
    done = wait_for(dispatcher, 4, woken)  # the started ones go on, and end well
    assert sorted(f.key for f in done if f.ok) == sorted(running)
    time.sleep(0.5)
    assert not any((tmp_path / f"{k}.started").exists() for k in waiting)  # never started


def test_a_job_too_late_for_its_worker_comes_back_to_go_elsewhere(
    client: Client, tmp_path: Path
) -> None:
    from snakemake_executor_plugin_dask_slurm.worker import task as worker_task

    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set)
    worker_task.JOBS.landing_at = time.time() + 5.0  # the in-process worker's landing point
    try:
        late = dataclasses.replace(spec(tmp_path, "late", "touch late.started"), needs=60.0)
        dispatcher.submit_many([(late, {"cpus": 1})])
        (finished,) = wait_for(dispatcher, 1, woken)
    finally:
        worker_task.JOBS.landing_at = None
    assert finished.too_late and not finished.ok and finished.outcome is None
    assert finished.problem and finished.problem.startswith("not started: it needs about 60 s")
    assert not (tmp_path / "late.started").exists()


def test_a_worker_says_which_jobs_started_whatever_the_events_container(
    client: Client, tmp_path: Path
) -> None:
    # The worker reports started jobs once a second (worker.preload.report_started); a lost
    # worker's jobs are told "running" or "waiting" from it. The keys arrive as a list
    # in-process and as a tuple through a scheduler on another host (msgpack): both count.
    dispatcher = Dispatcher(client, lambda: None)
    specs = [(spec(tmp_path, key, "sleep 30"), {"cpus": 1}) for key in ("a", "b", "c")]
    dispatcher.submit_many(specs)
    try:
        assert not any(dispatcher.ran(key) for key in ("a", "b", "c"))
        dispatcher._on_started_event((time.time(), ("a",)))
        dispatcher._on_started_event((time.time(), ["b", "not-a-job-of-this-run"]))
        assert dispatcher.ran("a") and dispatcher.ran("b") and not dispatcher.ran("c")
        assert not dispatcher.ran("not-a-job-of-this-run")
    finally:
        dispatcher.stop(["a", "b", "c"])

"""Several jobs in one Dask task (a batch) against a real in-process Dask scheduler and
worker: each job its own process, its own event as it ends, its own failure; a withdrawal
or a stop takes back exactly what has not started; a dead worker's batch is its jobs that
had not ended."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import (
    BATCH_MOVE,
    Dispatcher,
    SubmitFailed,
)
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.component.test_dispatcher import RefusesSecondMap, restrictions, wait_for
from tests.waiting import eventually

GATE = "while [ ! -e go ]; do sleep 0.02; done; "


def spec(tmp_path: Path, key: str, script: str, rule: str | None = "r") -> TaskSpec:
    return TaskSpec(
        key, ("/bin/bash", "-c", script), str(tmp_path), (), str(tmp_path / f"{key}.log"),
        None, batch=rule,
    )  # fmt: skip


def started(tmp_path: Path) -> set[str]:
    return {p.stem for p in tmp_path.glob("*.started")}


def scheduler_keys(client: Client) -> set[str]:
    def read(dask_scheduler: Any) -> list[str]:
        return [str(key) for key in dask_scheduler.tasks]

    return set(client.run_on_scheduler(read))


def test_a_batch_runs_its_jobs_at_once_and_each_ends_on_its_own(
    client: Client, tmp_path: Path
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=4)
    tasks = [
        (spec(tmp_path, "quick", "touch quick.started; echo quick > quick.out"), {"cpus": 1}),
        (spec(tmp_path, "slow-0", f"touch slow-0.started; {GATE}echo 0 > slow-0.out"), {"cpus": 1}),
        (spec(tmp_path, "slow-1", f"touch slow-1.started; {GATE}echo 1 > slow-1.out"), {"cpus": 1}),
        (spec(tmp_path, "bad", f"touch bad.started; {GATE}echo oops; exit 3"), {"cpus": 1}),
    ]  # fmt: skip
    dispatcher.submit_many(tasks)
    # One Dask task for the four, asking for their four CPUs together.
    assert restrictions(client, {"quick-b4"}) == {"quick-b4": {"cpus": 4.0}}
    assert not scheduler_keys(client) & {"quick", "slow-0", "slow-1", "bad"}
    eventually("every job started", lambda: started(tmp_path) == {t[0].key for t in tasks}, 30)
    # The quick one is told while the others still run: its end does not wait for theirs.
    (quick,) = wait_for(dispatcher, 1, woken)
    assert (quick.key, quick.ok) == ("quick", True) and quick.usage is not None
    assert not (tmp_path / "slow-0.out").exists()
    (tmp_path / "go").touch()
    done = wait_for(dispatcher, 3, woken)
    assert [(f.key, f.ok) for f in done] == [("bad", False), ("slow-0", True), ("slow-1", True)]
    bad = done[0]
    assert bad.outcome is not None and (bad.outcome.returncode, bad.outcome.tail) == (3, "oops")
    assert all(f.usage is not None and f.usage.wall > 0 for f in done)  # a usage row each
    assert [(tmp_path / f"slow-{i}.out").read_text() for i in (0, 1)] == ["0\n", "1\n"]
    eventually("the batch's task is gone", lambda: "quick-b4" not in scheduler_keys(client), 10)


def test_withdrawing_one_job_of_a_waiting_batch_moves_all_and_none_starts(
    client: Client, tmp_path: Path
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=4)
    # A batch that waits for a worker (4 CPUs, all taken by a job of another rule).
    blocker = spec(tmp_path, "blocker", f"{GATE}true", rule="other")
    dispatcher.submit_many([(blocker, {"cpus": 4})])
    eventually("the blocker runs", lambda: dispatcher.ran("blocker") or _running(client), 30)
    waiting = [spec(tmp_path, f"bw-{i}", f"touch bw-{i}.started") for i in range(3)]
    dispatcher.submit_many([(s, {"cpus": 1}) for s in waiting])
    assert restrictions(client, {"bw-0-b3"}) == {"bw-0-b3": {"cpus": 3.0}}
    assert dispatcher.withdraw(["bw-1"], move="its worker job lands") == {}
    taken = wait_for(dispatcher, 3, woken)
    assert [(f.key, f.too_late, f.problem) for f in taken] == [
        ("bw-0", True, BATCH_MOVE),
        ("bw-1", True, "its worker job lands"),
        ("bw-2", True, BATCH_MOVE),
    ]  # fmt: skip
    eventually("the batch's task is cancelled", lambda: "bw-0-b3" not in scheduler_keys(client), 10)
    (tmp_path / "go").touch()
    (end,) = wait_for(dispatcher, 1, woken)
    assert (end.key, end.ok) == ("blocker", True)
    time.sleep(0.3)
    assert not started(tmp_path)  # none of the batch ever started


def _running(client: Client) -> bool:
    def busy(dask_worker: Any) -> int:
        return len(dask_worker.state.executing)

    return any(client.run(busy).values())


def test_stopping_one_job_of_a_running_batch_leaves_the_others_running(
    client: Client, tmp_path: Path
) -> None:
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=4)
    script = "touch bs-{0}.started; " + GATE + "echo {0} > bs-{0}.out"
    jobs = [spec(tmp_path, f"bs-{i}", script.format(i)) for i in range(3)]
    dispatcher.submit_many([(s, {"cpus": 1}) for s in jobs])
    eventually("the batch's jobs started", lambda: len(started(tmp_path)) == 3, 30)
    assert dispatcher.stop(["bs-1"]) == {"bs-1"}
    (stopped,) = wait_for(dispatcher, 1, woken)
    assert stopped.key == "bs-1" and stopped.outcome is not None
    assert stopped.outcome.returncode == -15
    (tmp_path / "go").touch()
    rest = wait_for(dispatcher, 2, woken)
    assert [(f.key, f.ok) for f in rest] == [("bs-0", True), ("bs-2", True)]
    assert not (tmp_path / "bs-1.out").exists()


def test_a_lost_worker_loses_only_the_jobs_of_its_batch_that_had_not_ended(
    client: Client, tmp_path: Path
) -> None:
    """The scheduler names the batch's key among a removed worker's tasks (its event is
    injected here, the worker lives on): the job that had told its end is not lost again;
    the others are, each by its own key, and their later ends say they ran."""
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=4)
    scripts = {"a": f"{GATE}true", "b": "true", "c": f"{GATE}true"}
    dispatcher.submit_many([(spec(tmp_path, k, v), {"cpus": 1}) for k, v in scripts.items()])
    assert dispatcher.jobs_of(["a-b3", "other"]) == ["a", "b", "c", "other"]
    (ended,) = wait_for(dispatcher, 1, woken)
    assert (ended.key, ended.ok) == ("b", True)
    event = {
        "action": "remove-worker", "worker": "tls://10.0.0.2:4000", "expected": False,
        "processing-tasks": ["a-b3"], "stimulus_id": "handle-worker-cleanup-1",
    }  # fmt: skip
    dispatcher._on_scheduler_event((0.0, event))
    lost = WorkerRef("tls://10.0.0.2:4000", None)
    assert dispatcher.drain() == [
        Finished("a", False, problem="its Dask worker tls://10.0.0.2:4000 died", lost_on=lost),
        Finished("c", False, problem="its Dask worker tls://10.0.0.2:4000 died", lost_on=lost),
    ]
    assert dispatcher.jobs_of(["a-b3"]) == ["a-b3"]  # nothing of it is pending any more
    (tmp_path / "go").touch()
    late = wait_for(dispatcher, 2, woken)
    assert [(f.key, f.ok) for f in late] == [("a", True), ("c", True)]
    assert dispatcher.ran("a") and dispatcher.ran("c") and not dispatcher.ran("b")


def test_a_refused_map_names_only_the_jobs_of_maps_dask_did_not_take(
    client: Client, tmp_path: Path
) -> None:
    """One request's jobs go as a batch and a single job: two maps. When the second is
    refused, only its job is named as not taken; the batch's run."""
    woken = threading.Event()
    dispatcher = Dispatcher(client, woken.set, batch_limit=2)
    refusing = RefusesSecondMap(client)
    dispatcher.client = refusing  # type: ignore[assignment]
    jobs = [spec(tmp_path, f"pm-{i}", f"echo {i} > pm-{i}.out") for i in range(3)]
    with pytest.raises(SubmitFailed) as failed:
        dispatcher.submit_many([(s, {"cpus": 1}) for s in jobs])
    assert failed.value.keys == ["pm-2"]  # split 3 by 2: a batch of pm-0, pm-1; pm-2 alone
    done = wait_for(dispatcher, 2, woken)
    assert [(f.key, f.ok) for f in done] == [("pm-0", True), ("pm-1", True)]
    assert dispatcher.jobs_of(["pm-2"]) == ["pm-2"] and dispatcher.drain() == []

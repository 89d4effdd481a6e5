"""The scheduler handlers growth relies on, on a real (in-process) Dask scheduler: what
waits for CPUs and what each worker holds, and the retirement of idle workers only."""

from __future__ import annotations

import time
from typing import Any

from distributed import Client

from snakemake_executor_plugin_dask_slurm.worker.scheduler_preload import (
    LOAD_HANDLER,
    RETIRE_IDLE_HANDLER,
    dask_setup,
)
from tests.component.conftest import in_process_dask
from tests.waiting import eventually


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def call(client: Client, handler: str, **kwargs: Any) -> Any:
    c: Any = client
    return c.sync(getattr(c.scheduler, handler), **kwargs)


def test_load_and_idle_retirement() -> None:
    with in_process_dask(n_workers=2, threads=1) as (_, client):
        client.run_on_scheduler(lambda dask_scheduler: dask_setup(dask_scheduler))
        assert call(client, LOAD_HANDLER) == {"waiting_cpus": 0.0, "workers": {"0": 0, "1": 0}}
        futures = client.map(nap, [2.0, 2.0, 2.0], resources={"cpus": 1}, pure=False)

        def held_three() -> dict[str, Any]:
            load: dict[str, Any] = call(client, LOAD_HANDLER)
            return load if sum(load["workers"].values()) >= 3 else {}

        load = eventually("three tasks held", held_three, 20)
        # Three one-CPU tasks on two one-CPU workers: one waits.
        assert load["waiting_cpus"] == 1.0, load
        # Busy workers are not retired.
        assert call(client, RETIRE_IDLE_HANDLER, names=["0", "1"]) == []
        assert client.gather(futures) == [2.0, 2.0, 2.0]
        eventually("idle", lambda: not any(call(client, LOAD_HANDLER)["workers"].values()), 20)
        # An idle one is, and only the one named.
        assert call(client, RETIRE_IDLE_HANDLER, names=["0"]) == ["0"]
        eventually("one worker left", lambda: len(client.scheduler_info()["workers"]) == 1, 20)
        names = [w["name"] for w in client.scheduler_info()["workers"].values()]
        assert names == [1], names
        assert client.submit(nap, 0.0, resources={"cpus": 1}).result(timeout=10) == 0.0


def started_on(seconds: float) -> tuple[str, float]:
    from distributed import get_worker

    began = time.time()
    time.sleep(seconds)
    return str(get_worker().name), began


def test_a_joining_worker_gets_work_at_once() -> None:
    """Dask's own stealing round is set to 10 s here: only the preload's stealing on
    arrival can give the new worker a task within seconds."""
    import dask

    with (
        dask.config.set({"distributed.scheduler.work-stealing-interval": "10s"}),
        in_process_dask(threads=2) as (cluster, client),
    ):
        client.run_on_scheduler(lambda dask_scheduler: dask_setup(dask_scheduler))
        futures = client.map(started_on, [0.5] * 40, resources={"cpus": 1}, pure=False)
        # The first rounds run, and their durations are known.
        eventually("two tasks done", lambda: sum(f.done() for f in futures) >= 2, 20)
        cluster.scale(2)
        client.wait_for_workers(2, timeout=20)
        joined = time.time()
        results = client.gather(futures)
        on_new = [began for name, began in results if name != "0"]
        assert on_new, results
        # Dask's own round would come after 10 s: 3 leaves a loaded machine room.
        assert min(on_new) - joined < 3.0, min(on_new) - joined

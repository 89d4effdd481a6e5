"""Placement by time left on a real (in-process) Dask scheduler: workers advertise the
runway up to their landing points (worker/clock.py), and Dask alone places each job where
it can finish, keeps one that fits nowhere (counted as waiting CPUs for growth) until a
worker that has the time joins, and places nothing on the workers of a landing worker
job (``dask_slurm_land``), which says which tasks they hold."""

from __future__ import annotations

import time
from typing import Any

from distributed import Client, Worker, get_worker

from snakemake_executor_plugin_dask_slurm.worker.clock import advertised, runway_request
from snakemake_executor_plugin_dask_slurm.worker.scheduler_preload import (
    LAND_HANDLER,
    LOAD_HANDLER,
    dask_setup,
    refresh_runway,
)
from tests.component.conftest import in_process_dask
from tests.waiting import eventually

STEP = 1


def where(seconds: float) -> str:
    time.sleep(seconds)
    return str(get_worker().name)


def call(client: Client, handler: str, **kwargs: Any) -> Any:
    c: Any = client
    return c.sync(getattr(c.scheduler, handler), **kwargs)


def add_worker(
    client: Client, address: str, name: str, landing_in: float, later: float = 0.0
) -> Worker:
    """A worker landing ``landing_in`` seconds after it starts, ``later`` seconds from now
    (its runway as if it started then)."""
    now = time.time() + later
    resources = {"cpus": 2.0, **advertised(now + landing_in, now, STEP)}

    async def start() -> Worker:
        return await Worker(address, nthreads=2, resources=resources, name=name)

    c: Any = client
    return c.sync(start)  # type: ignore[no-any-return]


def submit(client: Client, needs: float, seconds: float = 0.0) -> Any:
    resources = {"cpus": 1.0, runway_request(needs, time.time(), STEP): 1.0}
    return client.submit(where, seconds, resources=resources, pure=False)


def test_dask_places_by_time_left_and_keeps_what_fits_nowhere_for_a_new_worker() -> None:
    with in_process_dask(n_workers=0) as (cluster, client):
        client.run_on_scheduler(lambda dask_scheduler: dask_setup(dask_scheduler))
        address = cluster.scheduler_address
        workers = [
            add_worker(client, address, "early", 30.0),
            add_worker(client, address, "late", 300.0),
        ]
        short = [submit(client, 10.0) for _ in range(8)]
        long = [submit(client, 100.0) for _ in range(4)]
        assert set(client.gather(long)) == {"late"}
        assert set(client.gather(short)) <= {"early", "late"}
        # Fits nowhere now: it waits, and growth sees its CPU waiting.
        far = submit(client, 1000.0)
        eventually("counted as waiting", lambda: call(client, LOAD_HANDLER)["waiting_cpus"], 10)
        assert far.status == "pending"
        workers.append(add_worker(client, address, "fresh", 3000.0))
        assert far.result(timeout=20) == "fresh"
        # A worker job lands: nothing new goes to its workers, and what they hold is said.
        busy = submit(client, 100.0, seconds=3.0)
        eventually("held", lambda: any(call(client, LOAD_HANDLER)["workers"].values()), 10)
        held = call(client, LAND_HANDLER, names=["late", "fresh"])
        assert sorted(held.values()) == [[], [busy.key]], held
        again = submit(client, 100.0)  # only late and fresh could hold it: both landing
        eventually("waiting", lambda: call(client, LOAD_HANDLER)["waiting_cpus"] >= 1.0, 10)
        assert again.status == "pending" and busy.result(timeout=20) in ("late", "fresh")
        client.cancel([again])
        for worker in workers:
            client.sync(worker.close)


def test_a_task_waiting_for_a_worker_asks_for_time_from_now_on() -> None:
    """A task that fits no worker waits; a worker job that joins much later (its runway
    starting there) can still take it once the scheduler moved its point on."""
    with in_process_dask(n_workers=0) as (cluster, client):
        far = submit(client, 50.0)  # no worker at all: it waits
        eventually("waiting", lambda: client.run_on_scheduler(
            lambda dask_scheduler: len(dask_scheduler.unrunnable)) == 1, 10)  # fmt: skip
        # A worker job that starts 100 s from now and lands 400 s later: its runway begins
        # after the task's point (handed over now, 50 s needed): it cannot take it as is.
        worker = add_worker(client, cluster.scheduler_address, "later", 400.0, later=100.0)
        time.sleep(0.5)
        assert far.status == "pending"
        needs: dict[str, float] = {}

        def refresh(dask_scheduler: Any) -> list[str]:  # as the preload does, 100 s on
            return refresh_runway(dask_scheduler, STEP, needs, time.time() + 100.0)

        assert client.run_on_scheduler(refresh) == [far.key]
        assert far.result(timeout=20) == "later"
        client.sync(worker.close)

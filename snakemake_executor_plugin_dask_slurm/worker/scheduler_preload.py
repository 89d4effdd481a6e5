"""Scheduler ``--preload`` module: the plugin's rules for its own scheduler.

- **Dask never runs a job twice on its own.** A task whose worker died is failed
  (``KilledWorker``) instead of being handed to another worker: the job's processes may
  still be writing its outputs until the worker's supervisor has ended them, and only
  the plugin, once it knows they are gone, decides whether the job runs again
  (``allowed_failures = 0``, whatever the user's Dask configuration says).
- **The scheduler exits when the Snakemake that owns it dies.** The plugin stops its
  scheduler in order when the workflow ends, fails or is interrupted; this covers the one
  case it cannot: the Snakemake process itself killed outright (SIGKILL, a crashed
  interpreter). The owner's PID comes in ``DASK_SLURM_OWNER_PID``; once this process's
  parent is no longer that PID, the scheduler closes, and its workers follow.
- **Teardown closes every worker at once** (the ``dask_slurm_close_workers`` handler).
  Dask's ``retire_workers`` first moves a worker's task results elsewhere and refuses to
  retire the last worker while it holds any (results of the last jobs, not yet released):
  the plugin needs none of them, so it asks each worker to close, and each exits by itself.
- **What growth needs to know, and how workers leave** (``dask_slurm_load``,
  ``dask_slurm_retire_idle``): the CPUs that jobs wait for (tasks no worker can take now,
  and what each worker was given beyond its CPUs) and how many tasks each worker holds;
  and an idle worker's retirement that cannot lose a job: in one step of the scheduler's
  event loop, a worker that holds no task is taken out of the running set (so nothing is
  assigned or stolen to it any more) and asked to close. Dask's own ``retire_workers``
  removes a worker as "expected", after which Dask itself would run its tasks again
  elsewhere: exactly what the plugin forbids.
- **A worker job lands** (``dask_slurm_land``): its workers leave the running set at once
  (nothing new goes there) and the tasks they hold are named, for the plugin to move
  (not started) or stop (cannot finish); once idle they retire as above.
- **Tasks waiting for a worker with time for them** (``dask_slurm_runway``, with worker
  jobs that have a time limit): every 2 s their runway point is moved on with the clock
  (:func:`refresh_runway`; see :mod:`.clock`).
- **A joining worker gets work at once**: stealing runs for it 50 and 300 ms after it
  joins, not only at Dask's next stealing round (every second).
- **The dashboard's pages are set up at their first visit** (``DASK_SLURM_DASHBOARD``):
  the scheduler starts with ``--no-dashboard`` (its HTTP server runs all the same, on the
  port the plugin prints), and the first request the HTTP server has no page for imports
  Dask's dashboard (Bokeh: 0.7 CPU-s, which every run paid on the scheduler's start, on
  the way to its first job) and adds its pages, then sends the browser back to the same
  address. A run nobody watches never imports it. Only a request with the run's token
  gets that far (:mod:`.http_guard`, installed before the scheduler made its HTTP server;
  checked here): a refused one never sets the pages up.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from . import dask_main, http_guard, quick_exit
from .clock import RUNWAY_PREFIX, point_of

#: Set (to anything) in the scheduler's environment: set up the dashboard's pages at their
#: first visit (:func:`dashboard_on_first_visit`).
DASHBOARD_VARIABLE = "DASK_SLURM_DASHBOARD"
#: What ``dask scheduler`` gives the dashboard by default (its ``--dashboard-prefix``).
DASHBOARD_PREFIX = ""

#: How often the scheduler checks on its owner, in milliseconds.
CHECK_INTERVAL_MS = 1000


def owner_gone(owner: int) -> bool:
    return os.getppid() != owner


#: The scheduler RPC the plugin's teardown calls.
CLOSE_WORKERS_HANDLER = "dask_slurm_close_workers"


def close_workers(scheduler: Any) -> list[str]:
    """Ask every worker to close now; the addresses asked."""
    workers = list(scheduler.workers)
    for address in workers:
        scheduler.close_worker(address)
    return workers


LOAD_HANDLER = "dask_slurm_load"
RETIRE_IDLE_HANDLER = "dask_slurm_retire_idle"
LAND_HANDLER = "dask_slurm_land"
RUNWAY_HANDLER = "dask_slurm_runway"
#: How often (ms) the runway of tasks waiting for a worker is moved on.
RUNWAY_REFRESH_MS = 2000


def _cpus(ts: Any) -> float:
    restrictions = getattr(ts, "resource_restrictions", None) or {}
    return float(restrictions.get("cpus", 1.0))


def load(scheduler: Any) -> dict[str, Any]:
    """{"waiting_cpus": CPUs asked for by tasks that no worker runs yet, "workers":
    {worker name: tasks it holds}}."""
    waiting = sum(_cpus(ts) for ts in list(scheduler.unrunnable))
    waiting += sum(_cpus(ts) for ts in list(getattr(scheduler, "queued", ())))
    workers = {}
    for ws in list(scheduler.workers.values()):
        held = list(ws.processing)
        capacity = float((ws.resources or {}).get("cpus", ws.nthreads))
        waiting += max(0.0, sum(_cpus(ts) for ts in held) - capacity)
        workers[str(ws.name)] = len(held)
    return {"waiting_cpus": waiting, "workers": workers}


def retire_idle(scheduler: Any, names: list[str]) -> list[str]:
    """Close the workers named ``names`` that hold no task; the names closed."""
    wanted = set(names)
    closed = []
    for address, ws in list(scheduler.workers.items()):
        if str(ws.name) in wanted and not ws.processing:
            scheduler.handle_worker_status_change(
                "closing_gracefully", ws, stimulus_id="dask-slurm-retire-idle"
            )
            scheduler.close_worker(address)
            closed.append(str(ws.name))
    return closed


def land(scheduler: Any, names: list[str]) -> dict[str, list[str]]:
    """A worker job lands: take its workers (``names``) out of the running set, so that
    nothing new is assigned or stolen to them, and say which tasks each holds (running
    or waiting there) for the plugin to move or stop. They stay connected until they
    are idle (then :func:`retire_idle`)."""
    wanted = set(names)
    held: dict[str, list[str]] = {}
    for ws in list(scheduler.workers.values()):
        if str(ws.name) in wanted:
            scheduler.handle_worker_status_change(
                "closing_gracefully", ws, stimulus_id="dask-slurm-land"
            )
            held[str(ws.name)] = [str(ts.key) for ts in ws.processing]
    return held


def refresh_runway(scheduler: Any, step: int, needs: dict[str, float], now: float) -> list[str]:
    """Tasks that wait for a worker with the time they need (``no-worker``) ask for the
    runway from ``now`` on, not from when they were handed over: a worker job that joins
    after a long queue wait can take them, and one that joins sooner takes only those that
    fit. ``needs`` (kept between calls) is each task's seconds needed, as first seen: its
    runway point less when it began to wait. The keys of the tasks a running worker can
    now take, which go to it."""
    seen: dict[str, float] = {}
    recommendations: dict[str, str] = {}
    wall = now - time.monotonic()
    for ts, since in list(scheduler.unrunnable.items()):
        restrictions = ts.resource_restrictions or {}
        name = next((n for n in restrictions if n.startswith(RUNWAY_PREFIX)), None)
        point = point_of(name) if name is not None else None
        if name is None or point is None:
            continue
        key = str(ts.key)
        need = needs.get(key)
        if need is None:
            need = max(0.0, point - (since + wall))
        seen[key] = need
        fresh = math.ceil((now + need) / step) * step
        if fresh <= point:
            continue
        moved = {n: v for n, v in restrictions.items() if n != name}
        moved[f"{RUNWAY_PREFIX}{fresh}"] = restrictions[name]
        ts.resource_restrictions = moved
        if scheduler.valid_workers(ts):
            recommendations[ts.key] = "processing"
    needs.clear()
    needs.update(seen)
    if recommendations:
        scheduler.transitions(recommendations, stimulus_id=f"dask-slurm-runway-{now}")
    return [str(key) for key in recommendations]


def start_runway(scheduler: Any, step: int) -> None:
    """Move the runway of waiting tasks on every ``RUNWAY_REFRESH_MS`` (once per run)."""
    if getattr(scheduler, "_dask_slurm_runway", None) is not None:
        return
    from tornado.ioloop import PeriodicCallback

    needs: dict[str, float] = {}

    def refresh() -> None:
        refresh_runway(scheduler, step, needs, time.time())

    callback = PeriodicCallback(refresh, RUNWAY_REFRESH_MS)
    scheduler._dask_slurm_runway = callback
    callback.start()


#: Seconds after a worker joins at which work is stolen for it (Dask's own stealing runs
#: every ``work-stealing-interval``, 1 s by default).
BALANCE_DELAYS = (0.05, 0.3)


def balance_on_arrival(scheduler: Any) -> None:
    """Steal work for a worker as soon as it joins (a worker job's, say), instead of at
    Dask's next stealing round: tasks with resource restrictions are assigned to a worker
    when submitted, so stealing is the only way a new worker gets any."""
    stealing = scheduler.extensions.get("stealing")
    if stealing is None:
        return
    from distributed.diagnostics.plugin import SchedulerPlugin

    class BalanceOnArrival(SchedulerPlugin):
        def add_worker(self, scheduler: Any = None, worker: Any = None) -> None:
            for delay in BALANCE_DELAYS:
                scheduler.loop.call_later(delay, stealing.balance)

    scheduler.add_plugin(BalanceOnArrival(), name="dask-slurm-balance-on-arrival")


def connect_dashboard(scheduler: Any) -> bool:
    """Add Dask's dashboard pages to the scheduler's running HTTP server, as Dask does at
    its start with ``--dashboard``; False (and a line in the scheduler's log) if they
    cannot be."""
    import logging

    log = logging.getLogger("distributed.scheduler")  # the scheduler's log, formatted
    began = time.monotonic()
    dask_main.allow_numpy()  # Bokeh's plots need it; the scheduler started without it
    try:
        import distributed.dashboard.scheduler as dashboard

        dashboard.connect(
            scheduler.http_application, scheduler.http_server, scheduler, prefix=DASHBOARD_PREFIX
        )
    except Exception as e:  # e.g. Bokeh missing: the rest of the HTTP server stays
        log.warning("dask-slurm: the dashboard's pages could not be set up: %r", e)
        return False
    log.info("dask-slurm: dashboard pages set up in %.1f s", time.monotonic() - began)
    return True


def dashboard_on_first_visit(scheduler: Any) -> None:
    """Set the dashboard's pages up at the first request the HTTP server has no page for
    (see the module's docstring); at once where Dask's HTTP application is not the one this
    was written for (distributed's ``RoutingApplication``: ``add_application`` and its list
    ``applications``, which it asks after its own routes)."""
    app: Any = getattr(scheduler, "http_application", None)
    if not callable(getattr(app, "add_application", None)) or not isinstance(
        getattr(app, "applications", None), list
    ):
        connect_dashboard(scheduler)
        return
    from tornado import web

    class FirstVisit(web.RequestHandler):
        def get(self, *args: Any) -> None:
            if first_visit in app.applications:  # once: the pages answer from now on
                app.applications.remove(first_visit)
                connect_dashboard(scheduler)
            self.redirect(self.request.uri or "/")

    first_visit = web.Application([(r".*", FirstVisit)])
    app.add_application(first_visit)


def dask_setup(scheduler: Any) -> None:
    scheduler.allowed_failures = 0
    quick_exit.at_exit()  # the scheduler leaves at once after its close
    scheduler.handlers[CLOSE_WORKERS_HANDLER] = lambda: close_workers(scheduler)
    scheduler.handlers[LOAD_HANDLER] = lambda: load(scheduler)
    scheduler.handlers[RETIRE_IDLE_HANDLER] = lambda names: retire_idle(scheduler, names)
    scheduler.handlers[LAND_HANDLER] = lambda names: land(scheduler, names)
    scheduler.handlers[RUNWAY_HANDLER] = lambda step: start_runway(scheduler, int(step))
    balance_on_arrival(scheduler)
    stopped = http_guard.enforce(scheduler)  # the token check is there, or no HTTP at all
    if stopped:
        import logging

        logging.getLogger("distributed.scheduler").warning(stopped)
    elif os.environ.get(DASHBOARD_VARIABLE):
        dashboard_on_first_visit(scheduler)
    owner = os.environ.get("DASK_SLURM_OWNER_PID")
    if not owner:
        return
    from tornado.ioloop import PeriodicCallback

    def check() -> None:
        if owner_gone(int(owner)):
            callback.stop()
            scheduler.loop.add_callback(scheduler.close)

    callback = PeriodicCallback(check, CHECK_INTERVAL_MS)
    callback.start()

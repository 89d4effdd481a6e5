"""The shared lifecycle of the sources that start their own scheduler and workers as
processes (local, srun, sbatch): run a :class:`.spec.ClusterSpec` — start all, wait for the
scheduler file, wait for every worker while watching every process — and tear down in
order (close workers through the scheduler, stop worker processes, stop the scheduler,
remove the scheduler file and the credentials, keep the logs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DaskSlurmError
from ..report.hints import blame_setting
from ..worker.scheduler_preload import CLOSE_WORKERS_HANDLER
from ..worker.waiting import Deadline, wait_until
from .base import ClusterSource, close_client, connect, dashboard_line, worker_count
from .preflight import check_plan
from .process import ManagedProcess, Status, wait_for_scheduler_file
from .security import RunSecurity
from .spec import ClusterSpec, ProcessSpec

if TYPE_CHECKING:
    from distributed import Client

    from .early import EarlyWorkers

logger = logging.getLogger(__name__)

#: Bounded waits of the teardown, in seconds.
RETIRE_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
#: Seconds retired workers get to exit by themselves before they are sent SIGTERM. A
#: SIGTERM that reaches a worker while it is closing can hang its exit (distributed 2026.8
#: cancels the close half-way), and it would then be killed only after STOP_TIMEOUT.
RETIRED_EXIT_TIMEOUT = 2.0
#: Seconds the close waits for the scheduler to say how many workers it still has.
COUNT_TIMEOUT = 1.0


class ProcessCluster(ClusterSource):
    """A scheduler and workers this plugin starts as processes, and stops."""

    def __init__(
        self,
        spec: ClusterSpec,
        timeout: float,
        security: RunSecurity,
        early: EarlyWorkers | None = None,
    ):
        self.spec = spec
        self.scheduler = managed(spec.scheduler)
        self.workers = [managed(worker) for worker in spec.workers]
        self.scheduler_file = spec.scheduler_file
        self.expected_workers = spec.expected_workers
        self.timeout = timeout
        self.security = security
        self.record_dir: Path = spec.record_dir
        self.restarts_workers = spec.restarts_workers
        self.description = spec.description
        self.client: Client | None = None
        self.bringup_seconds: float | None = None
        self.teardown_seconds: float | None = None
        self.launched: float | None = None  # time.monotonic() of launch()
        #: Workers started before the plan (local mode), adopted at the launch.
        self.early = early

    def launch(self, worker_env: Mapping[str, str] | None = None) -> None:
        """Start the scheduler and the workers (the workers wait for the scheduler file
        themselves; ``worker_env`` added to theirs), and return at once; once."""
        if self.launched is not None:
            return
        for worker in self.workers:
            worker.env = {**(worker.env or {}), **(worker_env or {})}
        self.launched = time.monotonic()
        with contextlib.suppress(FileNotFoundError):
            self.scheduler_file.unlink()  # a stale file would look ready at once
        clear_records(self.record_dir)  # a stale record could vouch for a live job
        try:
            self.security.prepare()
            self.scheduler.start()
            for index, worker in enumerate(self.workers):
                adopted = self.early.adopt(worker) if self.early is not None else None
                if adopted is not None:
                    self.workers[index] = adopted
                else:
                    worker.start()
            if self.early is not None:
                self.early.close()  # (any the plan has no place for)
        except BaseException:
            self.close()
            raise

    def start(self) -> Client:
        began = time.monotonic()
        self.launch()
        started = self.launched or began
        try:
            address = wait_for_scheduler_file(self.scheduler_file, self.scheduler, self.timeout)
            scheduled = time.monotonic() - started
            self.security.check_address(address)
            self.client = connect(address, self.timeout, self.security, probe_first=False)
            connected = time.monotonic() - started
            # The start-up timeout counts from this call: the run's first job may come long
            # after the launch (a long local rule first, say).
            self.wait_for_workers(Deadline(self.timeout - (time.monotonic() - began)))
        except BaseException:
            self.close()
            raise
        self.bringup_seconds = time.monotonic() - started
        self.steps = (
            ("the scheduler's file written", scheduled),
            ("connected", connected),
            (f"{self.expected_workers} worker(s) registered", self.bringup_seconds),
        )
        return self.client

    def wait_for_workers(self, deadline: Deadline) -> None:
        """Wait for every expected worker, watching every process we started."""
        assert self.client is not None
        while True:
            count = worker_count(self.client)
            if count >= self.expected_workers:
                return
            self._check_processes(count)
            if deadline.expired:
                raise DaskSlurmError(self.missing_workers_message(count))
            time.sleep(0.05)

    def _check_processes(self, count: int) -> None:
        if self.scheduler.status is not Status.running:
            raise DaskSlurmError(
                f"The Dask scheduler {self.scheduler.exit_description()} while workers "
                f"were starting. Its log ({self.scheduler.log_path}) ends with:\n"
                f"{self.scheduler.tail()}"
            )
        for proc in self.workers:
            if proc.status is not Status.running:
                tail = proc.tail()
                hint = blame_setting(tail, self.spec.user_settings) or self.worker_hint()
                raise DaskSlurmError(
                    f"The {proc.name} {proc.exit_description()} before all workers "
                    f"registered ({count} of {self.expected_workers}). Its log "
                    f"({proc.log_path}) ends with:\n{tail}\n{hint}"
                )

    def preflight(self) -> None:
        """Check, before anything starts, that this interpreter's Dask accepts every option
        the plan passes (:func:`.preflight.check_plan`)."""
        workers = [worker.argv for worker in self.workers]
        check_plan(self.scheduler.argv, workers, self.spec.user_worker_args)

    def scheduler_lost(self) -> bool:
        return self.scheduler.status is Status.exited

    def problem(self) -> str | None:
        if self.client is None:
            return None
        if self.scheduler_lost():
            proc = self.scheduler
            if (proc.returncode or 0) < 0:  # a signal from outside: its log cannot say why
                return (
                    f"the Dask scheduler {proc.exit_description()} while the workflow was "
                    f"running (by a kill from outside, or the kernel's out-of-memory killer); "
                    f"its log: {proc.log_path}"
                )
            return (
                f"the Dask scheduler {proc.exit_description()} while the workflow was "
                f"running. Its log ({proc.log_path}) ends with:\n{proc.tail(10)}"
            )
        if self.workers and all(p.status is Status.exited for p in self.workers):
            ended = "\n".join(
                f"--- the {p.name} {p.exit_description()}; its log ({p.log_path}) ends "
                f"with:\n{p.tail(6)}"
                for p in self.workers
            )
            return f"every Dask worker process has ended:\n{ended}"
        return None

    def deaths(self) -> list[str]:
        records = []
        with contextlib.suppress(OSError):
            for path in sorted(self.record_dir.glob("*.json")):
                with contextlib.suppress(OSError, ValueError):
                    records.append(json.loads(path.read_text()))
        return [f"{r.get('name')} (pid {r.get('pid')}) {r.get('exit')}" for r in records]

    def stop_workers(self) -> None:
        for proc in self.workers:  # all at once, so that their waits overlap
            proc.terminate()
        for proc in self.workers:
            proc.close(STOP_TIMEOUT)

    #: --dask-slurm-no-dashboard unset, and --dask-slurm-dashboard-address.
    show_dashboard = True
    dashboard_bind: str | None = None
    #: Whether the dashboard's line says the SSH tunnel to it (not on the user's machine).
    dashboard_tunnel = True

    def dashboard_lines(self) -> list[str]:
        if self.client is None or not self.show_dashboard:
            return []
        line = dashboard_line(
            self.client, self.dashboard_bind, self.dashboard_tunnel, self.security
        )
        return [line] if line else []

    def worker_hint(self) -> str:
        """What to try when workers do not come up (overridden per source)."""
        return "Fix what the log names and run again."

    def missing_workers_message(self, count: int) -> str:
        logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.tail(10)}" for p in self.workers)
        return (
            f"Only {count} of {self.expected_workers} Dask workers registered within "
            f"{self.timeout:.0f} s, so the run stops rather than run on fewer workers "
            f"than were reserved. The worker logs end with:\n{logs}\n{self.worker_hint()} "
            "If the machine is just slow, raise --dask-slurm-startup-timeout."
        )

    def close(self) -> None:
        """Tear down with the waits overlapping: the workers are asked to close; once the
        scheduler has none left (they have unregistered: what remains of their exit is
        their own), the client closes and the scheduler is sent SIGTERM while the worker
        processes exit; then whatever is still running is stopped."""
        started = time.monotonic()
        if self.early is not None:
            self.early.close()  # (a run that ends before its launch)
        scheduler_up = self.client is not None and not self.scheduler_lost()
        retired = self._retire_workers() if scheduler_up else 0
        # Only when all were retired: a process whose worker never registered (start-up
        # failed) would not exit by itself.
        deadline = Deadline(RETIRED_EXIT_TIMEOUT if retired >= self.expected_workers else 0.0)
        if retired >= self.expected_workers:
            wait_until(self._workers_left, deadline.remaining, interval=0.02)
        if self.client is not None:
            close_client(self.client, self.scheduler_lost())
            self.client = None
        self.scheduler.terminate()  # its exit overlaps the workers'
        wait_until(self._worker_processes_gone, deadline.remaining, interval=0.02)
        self.stop_workers()
        self.scheduler.close(STOP_TIMEOUT)
        with contextlib.suppress(FileNotFoundError):
            self.scheduler_file.unlink()
        self.security.close()
        self.teardown_seconds = time.monotonic() - started

    def _worker_processes_gone(self) -> bool:
        return all(p.status is not Status.running for p in self.workers)

    def _workers_left(self) -> bool:
        """No worker is left at the scheduler (or every worker process has ended). Asked
        under a bound: a scheduler that stopped answering must not hold the close up."""
        if self._worker_processes_gone() or self.client is None:
            return True
        client: Any = self.client
        try:
            info = client.sync(
                client.scheduler.identity, n_workers=0, callback_timeout=COUNT_TIMEOUT
            )
            return int(info["n_workers"]) == 0
        except Exception:  # the scheduler cannot say: wait for the processes instead
            return True

    def _retire_workers(self) -> int:
        """Ask the scheduler to close every worker (through the plugin's scheduler
        preload: Dask's retire_workers keeps a worker that holds task results); how many
        it asked."""
        client: Any = self.client
        try:
            asked = client.sync(
                getattr(client.scheduler, CLOSE_WORKERS_HANDLER), callback_timeout=RETIRE_TIMEOUT
            )
            return len(asked)
        except Exception as e:  # the processes are stopped next either way
            logger.debug("closing workers failed: %s", e)
            return 0


def clear_records(record_dir: Path) -> None:
    """Remove the supervisors' records of an earlier run."""
    with contextlib.suppress(FileNotFoundError):
        for path in record_dir.iterdir():
            with contextlib.suppress(OSError):
                path.unlink()


def managed(spec: ProcessSpec) -> ManagedProcess:
    """The process a spec describes, in this process's environment plus the spec's."""
    return ManagedProcess(spec.name, spec.argv, spec.log_path, dict(os.environ) | dict(spec.env))

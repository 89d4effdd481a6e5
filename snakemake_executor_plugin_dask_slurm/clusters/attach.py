"""A scheduler somebody else runs: the plugin connects, checks it can be used safely, and
never stops it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DaskSlurmError
from ..worker.waiting import Deadline
from .base import (
    ClusterSource,
    SchedulerUnreachable,
    close_client,
    connect,
    worker_count,
)
from .process import read_scheduler_file
from .security import AttachSecurity

if TYPE_CHECKING:
    from distributed import Client


#: A scheduler file younger than this may still be being written: not judged yet.
WRITING_GRACE = 2.0


def file_problem(path: Path, now: float) -> str | None:
    """Why ``path`` can never be a usable scheduler file, or None if it may still become
    one (it does not exist yet, or was written in the last ``WRITING_GRACE`` seconds)."""
    if not path.parent.is_dir():
        return f"its directory {path.parent} does not exist"
    try:
        text = path.read_text()
        written = path.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    if now - written < WRITING_GRACE:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return "it is not JSON, so not a file a Dask scheduler wrote"
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        return 'it holds no scheduler address (no "address" key)'
    return None


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


class AttachCluster(ClusterSource):
    """A scheduler somebody else runs. The plugin never stops it."""

    def __init__(
        self,
        address: str | None,
        scheduler_file: Path | None,
        timeout: float,
        security: AttachSecurity,
    ):
        self.address = address
        self.security: AttachSecurity = security
        self._warnings: list[str] = []
        self.scheduler_file = scheduler_file
        self.timeout = timeout
        self.client: Client | None = None
        where = address or f"the scheduler file {scheduler_file}"
        self.description = f"attaching to the Dask scheduler at {where}"

    def _address(self) -> str:
        """The address given, or the one in the scheduler file: waited for while the file
        does not exist yet in a directory that does (a scheduler still starting), at most
        the start-up timeout; any other bad file fails at once (:func:`file_problem`)."""
        if self.address:
            return self.address
        path = self.scheduler_file
        assert path is not None
        deadline = Deadline(self.timeout)
        while True:
            address = read_scheduler_file(path)
            if address:
                return address
            problem = file_problem(path, time.time())
            if problem:
                raise DaskSlurmError(
                    f"Cannot attach with the scheduler file {path}: {problem}. Name the file "
                    "your scheduler writes ('dask scheduler --scheduler-file FILE'), or its "
                    "address with --dask-slurm-scheduler-address."
                )
            if deadline.expired:
                raise DaskSlurmError(
                    f"The scheduler file {path} does not exist after {self.timeout:.0f} s. "
                    f"Start the scheduler first (e.g. 'dask scheduler --scheduler-file "
                    f"{path}') or fix the path."
                )
            time.sleep(0.1)

    def start(self) -> Client:
        address = self._address()
        self.security.check_address(address)
        warning = self.security.warning(address)
        self._warnings = [warning] if warning else []
        try:
            self.client = connect(address, self.timeout, self.security)
        except SchedulerUnreachable as e:
            if self.scheduler_file is None:
                raise DaskSlurmError(
                    f"{e} Check that the scheduler runs and that the address is right."
                ) from None
            raise DaskSlurmError(
                f"{e} That address comes from the scheduler file {self.scheduler_file}, "
                "whose scheduler has probably stopped: the file is stale. Start the "
                "scheduler again (it rewrites the file), or remove the file."
            ) from None
        try:
            self._check_no_reruns()
            self._wait_for_a_worker()
            self._check_cpus_advertised()
        except BaseException:
            self.close()
            raise
        return self.client

    def _check_no_reruns(self) -> None:
        """A scheduler that re-runs the task of a worker that died could run a job twice
        at once (its first copy may still write the outputs): refuse it."""
        assert self.client is not None
        allowed = self.client.run_on_scheduler(_allowed_failures)
        if allowed:
            raise DaskSlurmError(
                f"The Dask scheduler at {self.address or self.scheduler_file} runs a task "
                f"again when its worker dies (distributed.scheduler.allowed-failures = "
                f"{allowed}), so a job could run twice at once, both copies writing its "
                "outputs. Start that scheduler with allowed-failures 0, e.g. "
                "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 dask scheduler ..."
            )

    def _wait_for_a_worker(self) -> None:
        assert self.client is not None
        deadline = Deadline(self.timeout)
        while worker_count(self.client) == 0:
            if deadline.expired:
                raise DaskSlurmError(
                    f"The Dask scheduler at {self.address or self.scheduler_file} has no "
                    f"workers after {self.timeout:.0f} s. Start some, e.g. 'dask worker "
                    "<address> --nthreads N --resources cpus=N', then run again."
                )
            time.sleep(0.1)

    def _check_cpus_advertised(self) -> None:
        """Jobs ask for a ``cpus`` resource: workers without it could never run one."""
        assert self.client is not None
        workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        bare = [w.get("name", "?") for w in workers if "cpus" not in w.get("resources", {})]
        if bare:
            raise DaskSlurmError(
                f"Dask workers {', '.join(map(str, bare))} do not advertise a 'cpus' "
                "resource. Every job asks for one (its threads), so they could never run a "
                "job. Start workers with '--resources cpus=N' (N = their --nthreads)."
            )

    def warnings(self) -> list[str]:
        return self._warnings

    def close(self) -> None:
        if self.client is not None:
            close_client(self.client, self.scheduler_lost())
            self.client = None

    def scheduler_lost(self) -> bool:
        return self.client is not None and self.client.status not in ("running", "newly-created")

    def problem(self) -> str | None:
        if self.scheduler_lost():
            assert self.client is not None
            return f"the connection to the scheduler was lost (client {self.client.status})"
        return None

    def summary(self) -> list[str]:
        if self.client is None:
            return []
        info = self.client.scheduler_info(n_workers=-1)
        return [f"attached to {info['address']} with {len(info['workers'])} workers"]

"""Where the Dask cluster comes from: the interface every cluster source implements, and
how the plugin connects to a scheduler.

A source ``start()``s and returns a connected :class:`distributed.Client` once every
worker it expects has registered, and ``close()``s whatever it started (and nothing
else). :class:`.process_cluster.ProcessCluster` is the shared lifecycle of the sources that
start their own scheduler and workers as processes. Two parts are optional, attached to a
source rather than methods of every one (as distributed attaches ``Adaptive`` to a
cluster): its :class:`Growth` (worker jobs) and its :class:`SourceClock` (its workers'
time limits).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from ..errors import DaskSlurmError
from ..report.hints import dashboard_hint, token_note
from ..worker.clock import AllocationEnd, Runway, without_runway
from ..worker.supervisor import Swept
from .security import PlainTcp, RunSecurity

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: Seconds to wait for a TCP connection to the scheduler before calling it unreachable.
PROBE_TIMEOUT = 5.0


class Landings(Protocol):
    """What the run does with the jobs on a landing worker job's workers (the dispatch
    side, :class:`..dispatch.clock.worker_jobs.WorkerJobLanding`, handed to the source's
    clock by the glue: ``clusters/`` never imports ``dispatch/``)."""

    def land(self, job_id: str, keys: Sequence[str], hard_stop: float) -> tuple[int, int, int]:
        """Move what has not started, stop what cannot finish by ``hard_stop``: (going
        on, stopped, moved)."""

    def stop(self, job_id: str, keys: Sequence[str]) -> int:
        """Stop ``keys`` at the hard stop: how many."""


class Growth(ABC):
    """A farm that grows (worker jobs), as the run sees it: attached to its source as
    ``source.growth``, as distributed attaches ``Adaptive`` to a cluster (None: the
    source's workers are all it will have)."""

    @abstractmethod
    def future_offers(self) -> list[dict[str, float]]:
        """What workers that may still join will offer (Dask resources, one dict per kind
        of worker), counted for admission before they exist."""

    @abstractmethod
    def workers_may_come(self) -> bool:
        """Whether workers may still join, so that none alive now is not the end."""

    @abstractmethod
    def from_worker_job(self, worker: str) -> bool:
        """Whether ``worker`` runs in a worker job (which may end under its jobs)."""

    @abstractmethod
    def lost_with_its_job(self, worker: str, noticed: float) -> bool:
        """Whether a job that failed on ``worker`` at ``noticed`` was killed together with
        the worker's own SLURM job (may ask SLURM: seconds)."""


class SourceClock(ABC):
    """Every worker's clock as its source planned it (see worker/clock.py): attached to the
    source as ``source.clock`` (None: no worker of it has a known end)."""

    @abstractmethod
    def allocation_end(self) -> AllocationEnd | None:
        """The end of the allocation the run's own workers run in, and its margins, as their
        landing point was planned (None: they have none, or the source started none)."""

    @abstractmethod
    def runway(self) -> Runway | None:
        """How jobs are placed by their workers' time left, when workers of this run end at
        different times (None: they do not, or none has a known end)."""

    def land_worker_jobs_with(self, landings: Landings) -> bool:
        """What to do with the jobs on a worker job that lands; False for a source without
        worker jobs."""
        return False


@dataclass(frozen=True)
class PlannedClock(SourceClock):
    """The end and runway a source planned its own workers with."""

    end: AllocationEnd | None
    planned_runway: Runway | None

    def allocation_end(self) -> AllocationEnd | None:
        return self.end

    def runway(self) -> Runway | None:
        return self.planned_runway


class ClusterSource(ABC):
    """A Dask cluster the executor can submit to: its launch, start and close, what the
    user is told, and what the failure handling asks. A farm that grows and workers with a time
    limit add their parts as attributes (:attr:`growth`, :attr:`clock`)."""

    #: One line saying what this source is, for the log.
    description: str = ""
    #: Where the workers' supervisors record that a dead worker's jobs are gone (None:
    #: workers the plugin did not start, which have no supervisor).
    record_dir: Path | None = None
    #: Whether a worker that dies is started again (--dask-slurm-nanny).
    restarts_workers: bool = False
    #: How the plugin's client (and the processes it starts) authenticate.
    security: RunSecurity
    #: Workers that may still join (worker jobs); None: the source's workers are all.
    growth: Growth | None = None
    #: Its workers' ends (the time limit); None: no worker of it has a known end.
    clock: SourceClock | None = None
    #: The steps of its start, each with the seconds from its launch, once started
    #: (said with --verbose); none for a source that starts nothing.
    steps: tuple[tuple[str, float], ...] = ()

    def launch(self, worker_env: Mapping[str, str] | None = None) -> None:
        """Start the cluster's processes without waiting for them, so that their start
        overlaps the rest of Snakemake's (:meth:`start` then waits for them); the workers
        with ``worker_env`` added to their environment. Nothing by default: a source
        without processes of its own."""
        return None

    def preflight(self) -> None:
        """Check, before any job, that the commands the plan runs will run (raises
        :class:`..errors.DaskSlurmError` saying what to fix). Nothing by default."""
        return None

    @abstractmethod
    def start(self) -> Client:
        """Bring the cluster up (what :meth:`launch` did not yet) and return a client
        connected to it."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything this source started; safe to call more than once."""

    # -- what the user is told -----------------------------------------------------------

    def summary(self) -> list[str]:
        """Lines for the user once the cluster is up."""
        return []

    def warnings(self) -> list[str]:
        """What the user must be told once the cluster is up (at WARNING)."""
        return []

    def closing_lines(self) -> list[str]:
        """What the user is told once the source closed (at INFO)."""
        return []

    # -- what the failure handling asks --------------------------------------------------

    def problem(self) -> str | None:
        """Why the cluster can no longer run any job, from what can be seen without asking
        the scheduler (it may be gone): None while it can."""
        return None

    def scheduler_lost(self) -> bool:
        """Whether the scheduler is gone (so that nothing may wait for its answer)."""
        return False

    def allocation_problem(self) -> str | None:
        """Why the allocation the workers run in has ended, or None (may take seconds)."""
        return None

    def deaths(self) -> list[str]:
        """What the supervisors recorded of workers that ended, one line each."""
        return []

    def stop_workers(self) -> None:
        """Stop every worker process now, without the scheduler (their supervisors end
        their jobs); for a cluster whose scheduler is gone. Nothing for workers the
        plugin did not start."""
        return None

    def sweep(self, worker: str, keys: Sequence[str]) -> Swept | None:
        """End every process of ``keys`` left where ``worker`` ran: what was done and which
        of ``keys`` had processes; None if it cannot be done."""
        return None

    def end_worker(self, name: str, pid: int | None) -> str | None:
        """End a worker that stopped answering (its process ``pid`` where it runs), so that
        its supervisor ends its jobs and records it: what was done, or None if it cannot
        be done from here."""
        return None


def _host_port(address: str) -> tuple[str, int] | None:
    """``tcp://10.0.0.5:8786`` -> ("10.0.0.5", 8786); None if it has no port."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float) -> None:
    """Fail at once, naming the reason, when nothing accepts connections at ``address``
    (Dask's own connect retries a refused connection until its timeout)."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=min(timeout, PROBE_TIMEOUT)):
            return
    except ConnectionRefusedError as e:
        why = f"nothing listens there ({e.strerror or 'connection refused'})"
    except TimeoutError:
        why = f"no answer within {min(timeout, PROBE_TIMEOUT):.0f} s (a firewall, or no such host)"
    except OSError as e:
        why = f"it cannot be reached ({e.strerror or e})"
    raise SchedulerUnreachable(f"Cannot connect to the Dask scheduler at {address}: {why}.")


class SchedulerUnreachable(DaskSlurmError):
    """Nothing answers at the scheduler's address."""


def connect(
    address: str, timeout: float, security: RunSecurity, probe_first: bool = True
) -> Client:
    """A client for ``address``; the one place connection options (security) are set.

    ``probe_first``: fail at once if nothing listens (for a scheduler somebody else runs;
    a TLS scheduler logs the probe as a failed handshake, so the plugin's own scheduler,
    whose process it watches, is not probed)."""
    from distributed import Client

    if probe_first:
        probe(address, timeout)
    try:
        return Client(address, timeout=timeout, set_as_default=False, security=security.client())
    except OSError as e:
        raise DaskSlurmError(
            f"Could not connect to the Dask scheduler at {address} within {timeout:.0f} s: "
            f"{e}. Check that it is running and reachable from this machine."
        ) from e


def private_stream(stream: TextIO) -> bool:
    """Whether what is written to ``stream`` is read by its owner alone: a terminal or a
    file of this user's that nobody else may read (a pipe may end anywhere: not private)."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or not a file (io.StringIO)
        return False
    kind = stat.S_ISCHR(st.st_mode) or stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == os.getuid() and not st.st_mode & 0o044


def dashboard_line(
    client: Client, bind_address: str | None, tunnel: bool = True,
    security: RunSecurity | None = None,
) -> str | None:  # fmt: skip
    """Where the dashboard is and how to reach it, or None when the scheduler serves none.
    ``bind_address`` is --dask-slurm-dashboard-address (None: loopback); ``tunnel``: say
    the SSH tunnel to it (not for a scheduler on the user's own machine).

    With an HTTP token (``security``), the line (which goes to Snakemake's log, often
    readable by others) names the links without it, and where the links with it are: in
    a file only the user can read, and printed on stderr when that is the user's own
    terminal or private file (never through logging, whose handlers may write anywhere)."""
    port = client.scheduler_info(n_workers=0).get("services", {}).get("dashboard")
    if port is None:
        return None
    bound = (bind_address or "127.0.0.1:0").rpartition(":")[0].strip("[]")
    here, submit = socket.gethostname(), os.environ.get("SLURM_SUBMIT_HOST")
    link = client.dashboard_link
    token = security.http_token() if security is not None else None
    if security is None or token is None:
        return dashboard_hint(int(port), bound, here, submit, link, tunnel)
    full = dashboard_hint(int(port), bound, here, submit, link, tunnel, f"?token={token}", True)
    kept = security.keep_link(full)
    shown = private_stream(sys.stderr)
    if shown:
        print(f"dask-slurm: {full}", file=sys.stderr, flush=True)
    note = token_note(str(kept) if kept else None, shown)
    return dashboard_hint(int(port), bound, here, submit, link, tunnel, "", True) + note


def worker_count(client: Client) -> int:
    return int(client.scheduler_info(n_workers=0)["n_workers"])


def close_client(client: Client, scheduler_lost: bool) -> None:
    """Close the plugin's client. With its scheduler gone, the client is retrying to
    connect, and closing it makes Dask log a traceback of that cancelled retry: noise
    after the plugin has said what happened, so Dask's client logger is quietened."""
    if scheduler_lost:
        logging.getLogger("distributed.client").setLevel(logging.CRITICAL + 1)
    with contextlib.suppress(Exception):
        client.close(timeout=2)


def worker_offers(client: Client) -> list[dict[str, float]]:
    """What each worker registered now offers (its Dask resources)."""
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return [without_runway(worker.get("resources", {})) for worker in workers]


def started_lines(source: ClusterSource) -> tuple[list[str], list[str]]:
    """What the user is told once ``source`` is up: lines at INFO, lines at WARNING (plain
    TCP, and what the source warns of)."""
    said = source.summary()
    warnings = []
    security = source.security.describe()
    if isinstance(source.security, PlainTcp):
        warnings.append(f"security: {security}")
    elif security:
        said.append(f"security: {security}")
    return said, warnings + source.warnings()

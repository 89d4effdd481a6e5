"""The one place the plugin runs SLURM's commands (``scontrol``, ``srun`` for a one-off
step; later ``sbatch``, ``scancel``, ``squeue``), as argument lists, never a shell.

Two ways in, after dask-jobqueue's ``Job._call``: :func:`run` for commands whose failure
the caller must act on (a :class:`SlurmCommandError` names the command, its exit code,
what it said and what to try), and :func:`ask` for best-effort queries whose caller can do
without an answer (``None`` when SLURM could not say, e.g. a controller that is down).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import DaskSlurmError
from ..worker.supervisor import END_WORKER, SWEEP, Swept, parse_sweep
from .allocation import Allocation, parse_node_memory, read_allocation, with_node_memory
from .argv import sweep_step_command
from .states import GONE, parse_job_state
from .walltime import parse_duration, time_left

logger = logging.getLogger(__name__)

#: Seconds for the srun step that ends a lost worker's jobs when its supervisor is gone.
SWEEP_TIMEOUT = 30.0


class SlurmCommandError(DaskSlurmError):
    """A SLURM command failed: which, how, what it said, and what to try."""

    def __init__(self, argv: Sequence[str], problem: str, said: str, hint: str):
        self.argv, self.problem, self.said = list(argv), problem, said
        text = f"'{shlex.join(argv)}' {problem}"
        if said.strip():
            text += ". It said:\n  " + "\n  ".join(said.strip().splitlines()[-5:])
        super().__init__(f"{text}\n{hint}" if hint else text)


def run(
    argv: Sequence[str],
    timeout: float,
    hint: str = "",
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """Run a SLURM command (in ``env`` and ``cwd`` if given); its standard output and
    error, or SlurmCommandError."""
    logger.debug("running %s", shlex.join(argv))
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
    except OSError as e:
        raise SlurmCommandError(argv, f"could not be run ({e.strerror or e})", "", hint) from e
    except subprocess.TimeoutExpired as e:
        said = e.stderr if isinstance(e.stderr, str) else ""
        raise SlurmCommandError(argv, f"did not answer within {timeout:g} s", said, hint) from e
    if done.returncode != 0:
        said = done.stderr or done.stdout
        raise SlurmCommandError(argv, f"failed with exit code {done.returncode}", said, hint)
    return done.stdout


def ask(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """A best-effort query: its completed process (any exit code), or None if it could not
    run or did not answer in time."""
    logger.debug("asking %s", shlex.join(argv))
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


class Slurm:
    """:func:`run` and :func:`ask` as an object, for code that can take a test's scripted
    SLURM instead (see tests/slurm_script.py)."""

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> str:
        return run(argv, timeout, env=env, cwd=cwd)

    def ask(self, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
        return ask(argv, timeout)


@dataclass(frozen=True)
class SlurmCommands:
    """Paths of the SLURM commands the plugin runs; scontrol is optional."""

    srun: str
    scontrol: str | None  # None: the node list is expanded by the plugin itself


def find_commands(names: Sequence[str], why: str, path: str | None = None) -> dict[str, str]:
    """Where each of SLURM's commands ``names`` is on ``path`` (default: PATH); a
    :class:`SlurmCommandError` naming every one missing, and ``why`` the plugin needs it."""
    found = {name: shutil.which(name, path=path) for name in names}
    missing = [name for name, where in found.items() if where is None]
    if missing:
        raise SlurmCommandError(
            [", ".join(missing)],
            "is not on PATH" if len(missing) == 1 else "are not on PATH",
            "",
            f"{why} Make SLURM's commands available (often 'module load slurm').",
        )
    return {name: str(where) for name, where in found.items()}


def optional_command(name: str, path: str | None = None) -> str | None:
    """Where SLURM's ``name`` is, for a command the plugin can do without (scontrol)."""
    return shutil.which(name, path=path)


def find_slurm_commands(path: str | None = None) -> SlurmCommands:
    """Find ``srun`` (required) and ``scontrol`` (optional) on ``path`` (default: PATH)."""
    srun = find_commands(
        ["srun"],
        "The plugin starts the Dask workers on the allocated nodes with srun. Or use "
        "--dask-slurm-cluster local to run on this machine only.",
        path,
    )["srun"]
    return SlurmCommands(srun=srun, scontrol=optional_command("scontrol", path))


def scontrol_hostnames(scontrol: str, nodelist: str, timeout: float) -> list[str] | None:
    """The node names ``scontrol show hostnames`` prints, or None if it failed.

    None lets the caller fall back to :func:`.hostlist.expand_hostlist`; scontrol is
    preferred because it knows every form of node list SLURM writes.
    """
    done = ask([scontrol, "show", "hostnames", nodelist], timeout)
    if done is None:
        return None
    names = done.stdout.split()
    return names if done.returncode == 0 and names else None


def scontrol_job_state(
    scontrol: str, job_id: str, timeout: float, tries: int = 1, pause: float = 0.3
) -> tuple[str, str] | None:
    """``(JobState, Reason)`` of ``job_id``, ``(GONE, "None")`` if SLURM no longer knows it.

    None when scontrol could not answer (controller not reachable, busy, timed out): the
    caller cannot tell, and says nothing about the allocation. With ``tries`` > 1, a
    question it could not answer is asked again after ``pause`` seconds, each try given at
    most ``timeout / tries``, all within ``timeout`` (a controller busy ending the
    allocation is when the question is asked).
    """
    deadline = time.monotonic() + timeout
    for attempt in range(tries):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done = ask([scontrol, "show", "job", "-o", job_id], min(left, timeout / tries))
        if done is not None and done.returncode == 0:
            return parse_job_state(done.stdout)
        if done is not None and "Invalid job id" in done.stderr:
            return (GONE, "None")
        said = "no answer in time" if done is None else done.stderr.strip()[:200]
        logger.debug("scontrol show job %s, try %d of %d: %s", job_id, attempt + 1, tries, said)
        if attempt + 1 < tries:
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
    return None


def scontrol_time_left(scontrol: str, job_id: str, timeout: float) -> float | None:
    """Seconds ``job_id`` has left by SLURM's clock; None without a limit or an answer."""
    done = ask([scontrol, "show", "job", "-o", job_id], timeout)
    if done is None or done.returncode != 0:
        return None
    return time_left(done.stdout)


def scontrol_node_memory(scontrol: str, nodes: Sequence[str], timeout: float) -> dict[str, int]:
    """Each node's ``RealMemory`` in MiB, as SLURM counts ({} if scontrol could not say)."""
    done = ask([scontrol, "show", "node", "-o", ",".join(nodes)], timeout)
    if done is None or done.returncode != 0:
        return {}
    return parse_node_memory(done.stdout)


@dataclass(frozen=True)
class Queued:
    """A job as squeue lists it."""

    state: str
    nodes: str
    #: Seconds left before its time limit (None: no limit, or not established yet).
    left: float | None = None


def parse_squeue(text: str) -> dict[str, Queued]:
    """``ID|STATE|NODES|LEFT`` lines -> {id: Queued} (pure)."""
    found = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0]:
            found[parts[0]] = Queued(parts[1], parts[2], parse_duration(parts[3]))
    return found


def parse_sinfo(text: str) -> dict[str, int]:
    """``NODE|CPUS|STATE`` lines -> {node: CPUs} for nodes that are not down (pure)."""
    found = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1].isdigit():
            state = parts[2].rstrip("*~#!%$@^-")
            if state not in ("down", "drain", "drng", "fail", "failg", "futr", "inval"):
                found[parts[0]] = int(parts[1])
    return found


def read_granted_allocation(
    env: Mapping[str, str],
    scontrol: str | None,
    affinity_count: int | None,
    machine_count: int,
    timeout: float,
) -> Allocation:
    """The allocation this process runs in (the run's own, or a worker job's): its nodes
    expanded by ``scontrol`` when there is one, and each node's memory asked of SLURM when
    the allocation grants none explicitly."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    hostnames = scontrol_hostnames(scontrol, nodelist, timeout) if scontrol and nodelist else None
    alloc = read_allocation(env, hostnames, affinity_count, machine_count)
    if alloc.mem_mb is None and scontrol:
        alloc = with_node_memory(alloc, scontrol_node_memory(scontrol, alloc.nodes, timeout))
    return alloc


def node_of_worker(worker: str, nodes: Sequence[str]) -> str | None:
    """The node a worker named ``n3``, ``n3-1`` (several a node) or ``j12-n3`` (a worker
    job's) runs on, if it is one of ``nodes``."""
    if worker.startswith("j") and worker[1:].partition("-")[0].isdigit():
        worker = worker.partition("-")[2]
    if worker in nodes:
        return worker
    base = worker.rpartition("-")[0]
    return base if base in nodes else None


def sweep_node(
    slurm: Slurm, srun: str, python: str, node: str, keys: Sequence[str], job_id: str | None = None
) -> Swept | None:
    """End every process of the jobs ``keys`` left on ``node``, with a one-task srun step
    (in the allocation this process runs in, or in ``job_id``): what was done and which
    jobs had processes, or None if the step failed (logged)."""
    argv = sweep_step_command(node, python, [SWEEP, *keys], srun, job_id)
    try:
        said = slurm.run(argv, SWEEP_TIMEOUT)
    except SlurmCommandError as e:
        logger.warning("dask-slurm: ending the jobs' processes on %s failed: %s", node, e)
        return None
    where = f"in worker job {job_id} on {node}" if job_id else f"on {node}"
    found = parse_sweep(said)
    if found is None:
        return Swept(f"an srun step {where} ended them ({said.strip()})")
    return Swept(f"an srun step {where} ended {found[0]} process(es) of them", found[1])


def end_worker_on_node(
    slurm: Slurm, srun: str, python: str, node: str, pid: int, job_id: str | None = None
) -> str | None:
    """End the Dask worker ``pid`` on ``node`` with a one-task srun step (see
    :func:`..worker.supervisor.end_worker`): what was done, or None if the step failed."""
    argv = sweep_step_command(node, python, [END_WORKER, str(pid)], srun, job_id)
    try:
        said = slurm.run(argv, SWEEP_TIMEOUT)
    except SlurmCommandError as e:
        logger.warning("dask-slurm: ending the worker %s on %s failed: %s", pid, node, e)
        return None
    return f"an srun step on {node}: worker pid {pid} {said.strip() or '?'}"

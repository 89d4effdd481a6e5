"""Start one Dask worker and make sure nothing its jobs started outlives it.

Every Dask worker the plugin starts (in local mode and in each srun task) runs under this
small supervisor, in place of Dask's nanny. It

- names the worker (``--name``, or after the SLURM node it runs on, with the task's local
  index when a node runs several workers) and starts it without the srun step's own
  SLURM variables (see :func:`.environment.job_environment`), so that a rule's own
  ``srun`` sees the allocation;
- is a *child subreaper*: when the worker dies, even by SIGKILL or the kernel's
  out-of-memory killer, every process its jobs left running (including daemons that
  called ``setsid`` or double-forked) is re-parented to the supervisor, which kills them
  all at once;
- then writes a record, ``<record dir>/<worker name>-<worker pid>.json``, which is how
  the plugin learns that the dead worker's jobs are really gone before it tells Snakemake
  anything or runs them again elsewhere;
- restarts a worker that was killed by a signal when asked to (``--restarts N``);
- with ``--worker-args-on-stdin`` (and no restarts), starts the worker at once and leaves
  the rest of its options to come on stdin, which the worker reads (one JSON line;
  :mod:`.dask_main`): local mode starts its workers before it has planned the cluster;
- on SIGTERM (the plugin's teardown, srun stopping the step), waits for the worker —
  which gets the same signal through its process group or SLURM — to close, kills it if
  it does not within ``STOP_TIMEOUT``, and ends what is left.

Standard library only (it runs on the nodes). Usage::

    python -m snakemake_executor_plugin_dask_slurm.worker.supervisor [--name NAME] [--indexed]
        [--job-prefix] --record-dir DIR [--restarts N] -- <dask worker options without --name>
    python -m snakemake_executor_plugin_dask_slurm.worker.supervisor [--name NAME]
        --record-dir DIR --worker-args-on-stdin --
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import DASK_MAIN_MODULE, DASK_WORKER_MODULE, proctree
from .dask_main import ARGS_ON_STDIN, to_devnull
from .environment import job_environment
from .waiting import wait_until

WORKER_MODULE = DASK_WORKER_MODULE
#: Seconds the worker gets to close after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: Pause before a restart, so that a worker that dies at once does not spin.
RESTART_PAUSE = 0.5


@dataclass(frozen=True)
class Options:
    name: str | None
    indexed: bool
    record_dir: Path
    restarts: int
    worker_args: tuple[str, ...]
    job_prefix: bool = False
    #: The worker's options come on stdin (``--worker-args-on-stdin``).
    args_on_stdin: bool = False


def parse_args(argv: Sequence[str]) -> Options:
    args = list(argv)
    if "--" not in args:
        raise SystemExit("supervisor: separate the dask worker options with '--'")
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="supervisor")
    parser.add_argument("--name")
    parser.add_argument("--indexed", action="store_true")
    parser.add_argument("--job-prefix", action="store_true")
    parser.add_argument("--record-dir", required=True, type=Path)
    parser.add_argument("--restarts", type=int, default=0)
    parser.add_argument("--worker-args-on-stdin", action="store_true")
    ns = parser.parse_args(args[:split])
    worker_args = tuple(args[split + 1 :])
    if any(a == "--name" or a.startswith("--name=") for a in worker_args):
        raise SystemExit("supervisor: the worker's --name is set by the supervisor itself")
    if ns.worker_args_on_stdin and (worker_args or ns.restarts):
        raise SystemExit(
            "supervisor: with --worker-args-on-stdin the worker's options come on stdin, "
            "once: none after '--', and no --restarts"
        )
    return Options(
        ns.name, ns.indexed, ns.record_dir, ns.restarts, worker_args, ns.job_prefix,
        ns.worker_args_on_stdin,
    )  # fmt: skip


def worker_name(
    env: Mapping[str, str], hostname: str, name: str | None, indexed: bool, job_prefix: bool = False
) -> str:
    """The worker's name: given, or the SLURM node's (host name outside SLURM), after
    ``j<job id>-`` in a worker job, plus the task's index on its node when a node runs
    several workers."""
    base = name or env.get("SLURMD_NODENAME", "").strip() or hostname
    if job_prefix and env.get("SLURM_JOB_ID"):
        base = f"j{env['SLURM_JOB_ID']}-{base}"
    if indexed:
        return f"{base}-{env.get('SLURM_LOCALID', '0')}"
    return base


def describe_status(status: int) -> str:
    """A ``waitpid`` status in words."""
    return proctree.describe_exit(os.waitstatus_to_exitcode(status))


#: Tells the worker where to note, when it closes, which jobs it was running.
RECORD_DIR_VARIABLE = "DASK_SLURM_RECORD_DIR"


def record_path(record_dir: Path, name: str, pid: int) -> Path:
    return record_dir / f"{name}-{pid}.json"


def running_path(record_dir: Path, name: str, pid: int) -> Path:
    """Where a closing worker notes the jobs it still ran (see :func:`.task.dask_teardown`)."""
    return record_dir / f"{name}-{pid}.running"


def take_running_keys(record_dir: Path, name: str, pid: int) -> list[str]:
    """The keys a worker noted while it closed (its jobs were ended by then), or []."""
    path = running_path(record_dir, name, pid)
    try:
        keys = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return []
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def write_record(path: Path, record: Mapping[str, object]) -> None:
    """Write atomically: a reader sees the whole record or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


class Supervisor:
    def __init__(self, opts: Options, env: Mapping[str, str]):
        self.opts = opts
        self.name = worker_name(env, socket.gethostname(), opts.name, opts.indexed, opts.job_prefix)
        worker_env = job_environment(env)
        worker_env.pop(proctree.JOB_MARKER, None)  # ours must not pass for a job's
        worker_env[RECORD_DIR_VARIABLE] = str(opts.record_dir)
        self.worker_env = worker_env
        self.stopping = threading.Event()
        self.worker: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        deferred = [ARGS_ON_STDIN] if self.opts.args_on_stdin else []
        return [
            sys.executable, "-m", DASK_MAIN_MODULE, *deferred, WORKER_MODULE,
            "--name", self.name, *self.opts.worker_args,
        ]  # fmt: skip

    def on_signal(self, signum: int, frame: object) -> None:
        # The worker gets the same signal (its process group, or SLURM's step signal);
        # sending it a second one while it closes can hang its close. Only make sure it
        # ends in time.
        if not self.stopping.is_set():
            self.stopping.set()
            threading.Thread(target=self._kill_late, daemon=True).start()

    def _kill_late(self) -> None:
        worker = self.worker
        if worker is not None and not _wait(worker, STOP_TIMEOUT):
            say(f"worker {self.name} did not stop within {STOP_TIMEOUT:.0f} s: killing it")
            proctree.send([worker.pid], signal.SIGKILL)

    def run_once(self) -> int:
        """Start the worker, wait for it, end what its jobs left; its wait status."""
        # The worker reads its options from this process's stdin, which is then its alone.
        stdin = None if self.opts.args_on_stdin else subprocess.DEVNULL
        self.worker = subprocess.Popen(self.argv(), env=self.worker_env, stdin=stdin)
        if self.opts.args_on_stdin:
            to_devnull(0)
        pid = self.worker.pid
        _, status = _waitpid(pid)
        self.worker.returncode = os.waitstatus_to_exitcode(status)  # reaped above
        table = proctree.scan()
        left = proctree.descendants(proctree.children_of(os.getpid(), table), table)
        keys = {k for p in left if (k := proctree.job_marker(p)) is not None}
        keys.update(take_running_keys(self.opts.record_dir, self.name, pid))
        killed = proctree.kill_all_below(os.getpid())
        what = describe_status(status)
        write_record(
            record_path(self.opts.record_dir, self.name, pid),
            {
                "name": self.name,
                "pid": pid,
                "host": socket.gethostname(),
                "exit": what,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "jobs_left_running": sorted(keys),
                "processes_killed": killed,
                "time": time.time(),
            },
        )
        if killed or not self.stopping.is_set():
            jobs = f" (jobs {', '.join(sorted(keys))})" if keys else ""
            say(f"worker {self.name} (pid {pid}) {what}; ended {killed} process(es) left{jobs}")
        return status

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        if not proctree.become_subreaper():
            say("cannot become a child subreaper here: a killed worker's jobs may outlive it")
        restarts = self.opts.restarts
        while True:
            status = self.run_once()
            crashed = os.WIFSIGNALED(status) and not self.stopping.is_set()
            if not crashed or restarts <= 0:
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
            restarts -= 1
            done = self.opts.restarts - restarts
            say(f"restarting worker {self.name} ({done} of {self.opts.restarts})")
            time.sleep(RESTART_PAUSE)
            if self.stopping.is_set():
                return 0


def _waitpid(pid: int) -> tuple[int, int]:
    """Wait for ``pid``, reaping adopted orphans that exit meanwhile."""
    while True:
        found, status = os.waitpid(-1, 0)
        if found == pid:
            return found, status


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether ``proc`` (reaped by the main thread) ended within ``timeout``."""
    return wait_until(
        lambda: proc.returncode is not None or not proctree.pid_alive(proc.pid), timeout
    )


def say(message: str) -> None:
    print(f"dask-slurm supervisor: {message}", file=sys.stderr, flush=True)


#: ``python -m ...supervisor --sweep KEY...``: end every process of those jobs on this node.
SWEEP = "--sweep"
#: ``python -m ...supervisor --end-worker PID``: end a Dask worker that stopped answering.
END_WORKER = "--end-worker"


class Swept(NamedTuple):
    """How the processes of a dead worker's jobs were ended, and which jobs had any."""

    how: str
    running: tuple[str, ...] = ()


def parse_sweep(said: str) -> tuple[int, tuple[str, ...]] | None:
    """What a ``--sweep`` printed: (processes ended, keys that had any), or None."""
    try:
        data = json.loads(said.strip().splitlines()[-1])
        return int(data["ended"]), tuple(str(k) for k in data["running"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def sweep(keys: Sequence[str]) -> tuple[int, list[str]]:
    """SIGKILL every live process (and what it started) whose job marker is one of
    ``keys``, until none is left: how many were killed, and the keys that had any."""
    killed: set[int] = set()
    running: set[str] = set()
    for _ in range(50):
        table = proctree.scan()
        found = proctree.processes_of_jobs(keys, table)
        if not found:
            break
        running.update(found.values())
        victims = [p for p in proctree.descendants(found, table) if table[p].alive]
        proctree.send(victims, signal.SIGKILL)
        killed.update(victims)
        time.sleep(0.02)
    return len(killed), sorted(running)


def end_worker(pid: int) -> str:
    """SIGKILL the Dask worker ``pid`` (only if that pid is a Dask worker: a pid can be
    reused), so that its supervisor ends its jobs and writes its record."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if WORKER_MODULE not in cmdline:
        return "gone"  # the pid is some other process's now
    proctree.send([pid], signal.SIGKILL)
    return "killed"


#: ``python -m ...supervisor --worker-help``: Dask's worker help, reached through this
#: module, so that the plugin's preflight proves both importable where workers run.
WORKER_HELP = "--worker-help"


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args == [WORKER_HELP]:
        os.execv(sys.executable, [sys.executable, "-m", WORKER_MODULE, "--help"])
    if args[:1] == [SWEEP]:
        killed, running = sweep(args[1:])
        print(json.dumps({"ended": killed, "running": running}))
        return
    if args[:1] == [END_WORKER] and len(args) == 2 and args[1].isdigit():
        print(end_worker(int(args[1])))
        return
    opts = parse_args(args)
    sys.exit(Supervisor(opts, os.environ).run())


if __name__ == "__main__":
    main()

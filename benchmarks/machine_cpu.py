"""The whole machine's CPU during a run, split by process class (issue 46).

A ``CpuSampler`` thread reads, every ``interval`` seconds:

* ``/proc/stat``'s first line: the machine's busy time (user + nice + system + irq +
  softirq + steal jiffies, all CPUs; guest time is already inside user);
* ``/proc/<pid>/stat`` of every process on the machine (the SLURM test cluster's nodes
  share this PID namespace): its own CPU (utime + stime) and its reaped children's
  (cutime + cstime), each process put in one class the first time it is seen:

  - ``harness``: the benchmark's own process (this poller, the run's watcher);
  - ``snakemake``: the Snakemake process (the interpreter running the wrapper script);
  - ``dask``: the plugin's Dask side: scheduler, workers, supervisors (by their module in
    the command line) and the processes they fork without exec (zygote, primed servers:
    same command line as the parent);
  - ``slurm``: SLURM's programs and daemons (salloc, srun, slurmstepd, slurmd, slurmctld,
    munged), which on a real cluster run elsewhere;
  - ``jobs``: any other process below Snakemake or the Dask side (the jobs' own processes);
  - ``others``: everything else (other users, long-lived system processes).

The jobs' own CPU is measured, not inferred: most thin jobs live less than one poll, so
their CPU is read where the kernel puts it when they end, in the cutime + cstime of the
Snakemake or Dask-side process that reaps them (a worker; Snakemake for its local
executor). A parent's reaped time is frozen at its last poll before any of its tracked
non-job children ended (the zygote at a worker's shutdown, the scheduler at Snakemake's),
so that a reaped Dask process is not counted as a job. ``rest`` = the machine's busy time
- every class (``others`` too):
other users' short-lived processes, kernel threads, the last fraction of a poll of each
process that ended.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field

TICK = os.sysconf("SC_CLK_TCK")
CLASSES = ("harness", "snakemake", "dask", "slurm", "jobs", "others")
DASK_MARKERS = (
    "distributed.cli.dask_scheduler",
    "distributed.cli.dask_worker",
    "snakemake_executor_plugin_dask_slurm.worker.supervisor",
    "snakemake_executor_plugin_dask_slurm.worker.dask_main",
)
SLURM_COMMS = frozenset(
    (
        *("salloc", "srun", "sbatch", "squeue", "scontrol", "sinfo", "scancel", "sacct"),
        *("slurmstepd", "slurmd", "slurmctld", "slurmdbd", "munged"),
    )
)
#: /proc/stat cpu fields counted busy: user nice system (idle iowait) irq softirq steal
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
STEAL_FIELD = 7


def machine_jiffies() -> tuple[int, int]:
    """(busy jiffies, steal jiffies) of all CPUs together, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values[i] for i in BUSY_FIELDS), values[STEAL_FIELD]


def background(seconds: float) -> float:
    """The machine's busy CPU-seconds per second over ``seconds`` (run nothing meanwhile)."""
    before, t0 = machine_jiffies()[0], time.monotonic()
    time.sleep(seconds)
    return (machine_jiffies()[0] - before) / TICK / (time.monotonic() - t0)


def read_stat(pid: str) -> tuple[str, int, int, float, float] | None:
    """(comm, ppid, start time, own CPU s, reaped children's CPU s) of ``pid``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    own = (int(fields[11]) + int(fields[12])) / TICK
    reaped = (int(fields[13]) + int(fields[14])) / TICK
    return comm, int(fields[1]), int(fields[19]), own, reaped


def read_argv(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


@dataclass
class Proc:
    cls: str
    ppid: int
    cmdline: str
    own0: float  # at first sight (0 for a process born during the run)
    reaped0: float
    own: float = 0.0
    reaped: float = 0.0
    #: the reaped time while every tracked non-job child was still alive
    reaped_clean: float = 0.0
    frozen: bool = False
    alive: bool = True
    ours: bool = False  # below the benchmark, or a SLURM process started during the run
    role: str = ""  # the Dask side's: scheduler, worker, supervisor, fork (zygote, primed)
    #: reaped time that is not a job's: SLURM commands it ran (squeue, srun, ...)
    not_jobs: float = 0.0


@dataclass
class Sample:
    t: float  # time.time()
    busy: float  # machine busy CPU-s since the sampler started
    steal: float
    by_class: dict[str, float]


REAPERS = ("snakemake", "dask")
#: The Dask side's CPU by role, beside the classes (not added to them again).
ROLES = ("dask.scheduler", "dask.worker", "dask.supervisor", "dask.fork", "dask.other")


@dataclass
class CpuSampler:
    """Polls the machine and every process; Snakemake is the process running ``script``."""

    script: str
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    procs: dict[tuple[int, int], Proc] = field(default_factory=dict)  # (pid, start) -> Proc
    _live: dict[int, tuple[int, int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _origin: tuple[int, int] = (0, 0)

    def start(self) -> None:
        self._origin = machine_jiffies()
        self._scan(first=True)
        self._record()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cpu-sampler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._scan(first=False)
        self._record()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._scan(first=False)
            self._record()

    def _parent(self, ppid: int) -> Proc | None:
        key = self._live.get(ppid)
        return self.procs.get(key) if key else None

    def _classify(
        self, pid: int, comm: str, ppid: int, argv: list[str], first: bool
    ) -> tuple[str, bool]:
        """The process's class; only our run's processes (below this one, or a SLURM step
        started during the run) can be Snakemake, Dask side or jobs."""
        cmdline = " ".join(argv)
        parent = self._parent(ppid)
        if pid == os.getpid():
            return "harness", True
        ours = (parent is not None and parent.ours) or (comm in SLURM_COMMS and not first)
        if not ours:
            return ("slurm" if comm in SLURM_COMMS else "others"), False
        if argv[1:2] == [self.script]:
            return "snakemake", True
        if any(m in cmdline for m in DASK_MARKERS):
            return "dask", True
        if comm in SLURM_COMMS:
            return "slurm", True
        if parent is not None and parent.cls == "harness":
            return "harness", True  # what the benchmark runs itself (git)
        if parent is not None and parent.cls == "dask" and cmdline == parent.cmdline:
            return "dask", True  # forked without exec: zygote, primed server
        return "jobs", True

    def _role(self, proc: Proc) -> str:
        parent = self._parent(proc.ppid)
        if parent is not None and parent.cls == "dask" and parent.cmdline == proc.cmdline:
            return "fork"
        for marker, role in (("dask_scheduler", "scheduler"), ("dask_worker", "worker")):
            if marker in proc.cmdline:
                return role
        if "supervisor" in proc.cmdline:
            return "supervisor"
        return "other"

    def _scan(self, first: bool) -> None:
        rows = []
        for name in os.listdir("/proc"):
            if name.isdigit() and (stat := read_stat(name)) is not None:
                rows.append((int(name), stat))
        rows.sort()  # parents first, mostly
        seen = {(pid, stat[2]) for pid, stat in rows}
        for pid, key in list(self._live.items()):
            if key not in seen:  # ended since the last scan: its parent may have reaped it
                gone = self.procs[key]
                gone.alive = False
                parent = self._parent(gone.ppid)
                if parent is not None and gone.cls in ("snakemake", "dask"):
                    parent.frozen = True
                elif parent is not None and gone.cls == "slurm":
                    parent.not_jobs += gone.own + gone.reaped - gone.own0 - gone.reaped0
                del self._live[pid]
        for pid, (comm, ppid, start, own, reaped) in rows:
            key = (pid, start)
            proc = self.procs.get(key)
            if proc is None:
                argv = read_argv(str(pid))
                cls, ours = self._classify(pid, comm, ppid, argv, first)
                base = (own, reaped) if first else (0.0, 0.0)
                proc = self.procs[key] = Proc(cls, ppid, " ".join(argv), *base, ours=ours)
                proc.role = self._role(proc) if cls == "dask" else ""
                self._live[pid] = key
            proc.own, proc.reaped, proc.ppid = own, reaped, ppid
            if not proc.frozen:
                proc.reaped_clean = reaped

    def _record(self) -> None:
        busy, steal = machine_jiffies()
        by_class = dict.fromkeys(CLASSES, 0.0) | dict.fromkeys(ROLES, 0.0)
        for proc in self.procs.values():
            if proc.cls != "jobs":
                by_class[proc.cls] += proc.own - proc.own0
            if proc.role:
                by_class[f"dask.{proc.role}"] += proc.own - proc.own0
            if proc.cls in REAPERS:  # the jobs that ended: reaped by Snakemake or a worker
                by_class["jobs"] += proc.reaped_clean - proc.reaped0 - proc.not_jobs
            elif proc.cls == "jobs" and proc.alive:  # running jobs, not reaped yet
                parent = self._parent(proc.ppid)
                if parent is not None and parent.cls in REAPERS:
                    by_class["jobs"] += proc.own + proc.reaped - proc.own0 - proc.reaped0
        self.samples.append(
            Sample(
                time.time(),
                (busy - self._origin[0]) / TICK,
                (steal - self._origin[1]) / TICK,
                by_class,
            )
        )

    def between(self, start: float, end: float) -> Sample:
        """The machine's and every class's CPU-s from ``start`` to ``end`` (time.time())."""
        a, b = self.at(start), self.at(end)
        return Sample(
            b.t - a.t,
            b.busy - a.busy,
            b.steal - a.steal,
            {k: b.by_class[k] - a.by_class[k] for k in b.by_class},
        )

    def at(self, when: float) -> Sample:
        """The sample values at ``when``, interpolated linearly between two samples."""
        s = self.samples
        if when <= s[0].t:
            return s[0]
        for a, b in itertools.pairwise(s):
            if a.t <= when <= b.t:
                w = (when - a.t) / max(b.t - a.t, 1e-9)
                mix = {k: a.by_class[k] + w * (b.by_class[k] - a.by_class[k]) for k in a.by_class}
                return Sample(
                    when,
                    a.busy + w * (b.busy - a.busy),
                    a.steal + w * (b.steal - a.steal),
                    mix,
                )
        return s[-1]


def per_job(
    sampler: CpuSampler, start: float, end: float, jobs: int, background_rate: float
) -> dict[str, float]:
    """ms of CPU per job in ``[start, end]``: the machine, its background, each class.

    ``net`` = the machine - the background (its rate before the run x the window): what
    the run added. ``rest`` = the machine - every class (``others`` included): what no
    process seen by a poll accounts for (short-lived processes not ours, kernel threads,
    the last part of a poll of every process that ended). ``ours`` = Snakemake + the Dask
    side + the jobs + SLURM's processes: the run's own CPU, however loaded the machine.
    """
    d = sampler.between(start, end)
    bg = background_rate * d.t
    ms = 1000.0 / max(jobs, 1)
    out = {
        "machine_ms": d.busy,
        "background_ms": bg,
        "net_ms": d.busy - bg,
        "steal_ms": d.steal,
        **{f"{k}_ms": v for k, v in d.by_class.items()},
        "rest_ms": d.busy - sum(d.by_class[k] for k in CLASSES),
        "ours_ms": sum(d.by_class[k] for k in ("snakemake", "dask", "jobs", "slurm")),
    }
    return {"seconds": round(d.t, 3), **{k: round(v * ms, 3) for k, v in out.items()}}

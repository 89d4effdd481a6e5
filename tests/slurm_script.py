"""A scripted SLURM for the worker-job pool's loop (like submitit's ``MockedSubprocess``):
what ``sbatch``, ``squeue``, ``scancel`` and ``sinfo`` answer, as a small model of a queue
the test moves along (start a job, end it), and every command recorded. For a unit of
the pool's decisions in milliseconds; the real SLURM test cluster tests the behaviour
(tests/test_slurm_growth.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from snakemake_executor_plugin_dask_slurm.slurm.run import SlurmCommandError


@dataclass
class ScriptedJob:
    state: str = "PENDING"
    nodes: str = ""
    #: When its time limit ends (None: no limit), by the script's clock (``now``).
    end: float | None = None


@dataclass
class ScriptedSlurm:
    """Answers the pool's SLURM commands from :attr:`jobs`; ``sinfo`` lists :attr:`nodes`."""

    nodes: Mapping[str, int] = field(default_factory=lambda: {"n1": 4, "n2": 4, "n3": 8})
    jobs: dict[str, ScriptedJob] = field(default_factory=dict)
    next_id: int = 100
    #: sbatch fails with this message (None: it succeeds).
    refuse: str | None = None
    #: squeue does not answer (a controller that is down).
    silent: bool = False
    calls: list[list[str]] = field(default_factory=list)
    #: The script's clock: what squeue's time left is counted from.
    now: float = 0.0

    # -- what the test does ------------------------------------------------------------

    def start(self, job_id: str, nodes: str, limit: float | None = None) -> None:
        end = self.now + limit if limit is not None else None
        self.jobs[job_id] = ScriptedJob("RUNNING", nodes, end)

    def end(self, job_id: str, state: str = "COMPLETED") -> None:
        self.jobs[job_id].state = state

    def commands(self, name: str) -> list[list[str]]:
        return [argv for argv in self.calls if argv[0].endswith(name)]

    # -- what the pool calls (slurm.run.Slurm) -------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> str:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0].endswith("sbatch"):
            if self.refuse is not None:
                raise SlurmCommandError(argv, "failed with exit code 1", self.refuse, "")
            if "--test-only" in argv:
                return "sbatch: Job 0 to start at now using 8 processors on nodes n1"
            job_id = str(self.next_id)
            self.next_id += 1
            self.jobs[job_id] = ScriptedJob()
            return f"{job_id}\n"
        if argv[0].endswith("sinfo"):
            return "".join(f"{n}|{c}|idle\n" for n, c in self.nodes.items())
        raise AssertionError(f"unexpected command {argv}")

    def _left(self, job: ScriptedJob) -> str:
        """squeue's %L: UNLIMITED, or the time left as [H:]MM:SS."""
        if job.end is None:
            return "UNLIMITED"
        left = max(0, int(job.end - self.now))
        return f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"

    def ask(self, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0].endswith("squeue"):
            if self.silent:
                return None
            ids = next(a for a in argv if a.startswith("--jobs=")).removeprefix("--jobs=")
            lines = [
                f"{i}|{job.state}|{job.nodes}|{self._left(job)}"
                for i in ids.split(",")
                if (job := self.jobs.get(i)) is not None
            ]
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines) + "\n", "")
        if argv[0].endswith("scancel"):
            for job_id in argv[1:]:
                if job_id in self.jobs:
                    self.jobs[job_id].state = "CANCELLED"
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(f"unexpected command {argv}")


@dataclass
class ScriptedScheduler:
    """The scheduler's handlers the pool calls: its load, a worker job's landing (its
    workers out of the running set, the tasks they hold), and the retirement of workers."""

    waiting_cpus: float = 0.0
    #: worker name -> tasks it holds
    workers: dict[str, int] = field(default_factory=dict)
    retired: list[list[str]] = field(default_factory=list)
    #: worker name -> the keys of the tasks it holds (what dask_slurm_land answers)
    keys: dict[str, list[str]] = field(default_factory=dict)
    landed: list[list[str]] = field(default_factory=list)

    def __call__(self, handler: str, **kwargs: Any) -> Any:
        if handler == "dask_slurm_load":
            return {"waiting_cpus": self.waiting_cpus, "workers": dict(self.workers)}
        if handler == "dask_slurm_land":
            names = list(kwargs["names"])
            self.landed.append(names)
            return {n: list(self.keys.get(n, [])) for n in names if n in self.workers}
        if handler == "dask_slurm_retire_idle":
            names = list(kwargs["names"])
            idle = [n for n in names if not self.workers.get(n)]
            self.retired.append(idle)
            for name in idle:
                self.workers.pop(name, None)
            return idle
        raise AssertionError(f"unexpected handler {handler}")

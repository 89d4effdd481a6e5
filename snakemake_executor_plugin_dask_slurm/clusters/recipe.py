"""The workers' recipe (pure): how to start the Dask workers of an allocation, whichever
nodes it holds — what the srun steps of the run's own allocation and those of every worker
job have in common, and where those workers land. It is the one thing the run hands its
worker jobs: written as JSON into the run directory (:mod:`.worker_jobs.provider`), read
back on each worker job's first node (:mod:`.worker_jobs.in_job`), which plans its steps
from it as the run planned its own (:func:`.spec.plan_worker_steps`). The rest of the
run's plan is :mod:`.spec`'s.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..worker.clock import LANDING_VARIABLE
from .dask_argv import SupervisorOptions, WorkerOptions

#: Workers exit when they cannot reach the scheduler for this long.
DEATH_TIMEOUT = 60.0


@dataclass(frozen=True)
class WorkerRecipe:
    """How to start the workers of an allocation, whichever nodes it holds: what the srun
    steps of the run's own allocation and those of every worker job (:mod:`.worker_jobs.in_job`,
    which reads it back from JSON on the job's first node) have in common."""

    python: str
    scheduler_file: str
    record_dir: str
    log_dir: str
    local_directory: str | None
    interface: str | None
    srun_args: tuple[str, ...]
    #: After the plugin's own: the task preload, the security options, the user's.
    extra_args: tuple[str, ...]
    restarts: int
    env: tuple[tuple[str, str], ...]
    #: Name workers ``j<job id>-<node>`` (worker jobs), not ``<node>``.
    job_prefix: bool = False
    #: A worker job lands this long before its end (0: it does not land by itself).
    landing_margin: float = 0.0
    #: The run's runway grid step (None: no runway, see :mod:`..worker.clock`), and how
    #: far before a worker's start its runway reaches.
    runway_step: int | None = None
    runway_lookback: float = 0.0

    def worker_options(
        self, nthreads: int, resources: Mapping[str, float], host: str | None = None
    ) -> WorkerOptions:
        """One worker's ``dask worker`` options, with ``nthreads`` threads advertising
        ``resources`` (listening on ``host`` unless an interface is named)."""
        return WorkerOptions(
            scheduler_file=self.scheduler_file,
            nthreads=nthreads,
            resources=tuple(sorted(resources.items())),
            local_directory=self.local_directory,
            interface=self.interface,
            host=None if self.interface else host,
            death_timeout=DEATH_TIMEOUT,
            extra_args=self.extra_args,
        )

    def supervisor_options(
        self, name: str | None = None, indexed: bool = False
    ) -> SupervisorOptions:
        return SupervisorOptions(
            record_dir=self.record_dir,
            name=name,
            indexed=indexed,
            restarts=self.restarts,
            job_prefix=self.job_prefix,
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> WorkerRecipe:
        fields = json.loads(text)
        for name in ("srun_args", "extra_args"):
            fields[name] = tuple(fields[name])
        fields["env"] = tuple(tuple(pair) for pair in fields["env"])
        return cls(**fields)


@dataclass(frozen=True)
class LandingPoint:
    """The landing point of an allocation's workers, and when they start (from which
    they advertise the run's runway, if it has one)."""

    at: float
    now: float

    def env(self) -> tuple[tuple[str, str], ...]:
        return ((LANDING_VARIABLE, f"{self.at:.3f}"),)

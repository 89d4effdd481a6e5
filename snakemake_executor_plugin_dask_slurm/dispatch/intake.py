"""A chunk of Snakemake's jobs in, tasks to hand over (and refusals) out: the admission
decision for each job, then its task built (:mod:`.job_commands`).

Runs on Snakemake's scheduling thread for every chunk of every round: per job, one dict
for its request, one capacity check, and the builder's per-rule cached decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from ..report.messages import job_label
from .admission import Capacity, admit, capped_message, job_request, unsatisfiable_message
from .clock.placement import Placement
from .job_commands import JobCommandBuilder
from .registry import JobRecord, Refusal


@dataclass
class Intake:
    builder: JobCommandBuilder
    capacity: Capacity
    #: Local mode: cap what no worker has (the local executor's semantics) instead of
    #: refusing it (SLURM's).
    cap: bool
    key_of: Callable[[Any], str]
    #: Logs one line (a rule whose requests were capped, once per rule).
    note: Callable[[str], None]
    #: Placement by time (the allocation's clock, the workers' runway); None when no
    #: worker of the run has a time limit (see :class:`.clock.placement.Placement`).
    placement: Placement | None = None
    _capped_rules: set[str] = field(default_factory=set)

    def take(self, jobs: Sequence[Any]) -> tuple[list[JobRecord], list[Refusal]]:
        """Admit and build each job; a job that cannot run or be built is refused alone."""
        admitted: list[tuple[SubmittedJobInfo, dict[str, float]]] = []
        refused: list[Refusal] = []
        advertised = self.capacity.advertised
        placement = self.placement
        now = time.time()
        expected: dict[str, float | None] = {}
        needs: dict[str, float | None] = {}
        for job in jobs:
            key = self.key_of(job)
            info = SubmittedJobInfo(job, external_jobid=key)
            asked = job_request(job.threads, job.resources, advertised)
            decision = admit(asked, self.capacity, self.cap)
            if decision is None:
                msg = unsatisfiable_message(job_label(job), asked, self.capacity)
                refused.append((info, msg))
                continue
            request, capped = decision
            if placement is not None:
                late, seconds = placement.check(job, key)
                if late is not None:
                    refused.append((info, late + "\n"))
                    continue
                expected[key] = seconds
                needs[key] = placement.needs(seconds)  # what its worker checks at its start
                runway = placement.runway_name(seconds, now)
                if runway is not None:
                    request[runway] = 1.0
            if capped and job.name not in self._capped_rules:
                self._capped_rules.add(job.name)
                self.note(capped_message(job, asked, capped, self.capacity))
            admitted.append((info, request))
        keys = [(info.job, info.external_jobid) for info, _ in admitted]
        built = self.builder.build_many(keys, needs)
        records: list[JobRecord] = []
        for (info, request), item in zip(admitted, built, strict=True):
            if isinstance(item, Exception):
                refused.append((info, f"{job_label(info.job)} could not be prepared: {item}\n"))
                continue
            spec, way = item
            # spec and request: to run it again if its worker dies under it; when and how
            # long expected: for the landing
            records.append(JobRecord(info, spec, request, way, now, expected.get(spec.key)))
        return records, refused

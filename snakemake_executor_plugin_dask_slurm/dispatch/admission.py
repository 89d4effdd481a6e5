"""Map a Snakemake job's resources to Dask worker resources, and decide what may run.

Workers advertise what they really have (``cpus`` always; ``mem_mb`` and ``gpus`` when
known). A job asks for ``cpus`` = its threads, ``mem_mb`` when the workers advertise
memory, and ``gpus`` when it asks for any. A request that no worker can ever satisfy would
sit in Dask's ``no-worker`` state forever, so :func:`admit` decides at once, by the
semantics of the mode:

- **srun / attach (SLURM's semantics):** a job no worker can ever hold fails at once, as
  ``sbatch`` would refuse it.
- **local (Snakemake's local executor's semantics):** threads are already scaled down by
  Snakemake itself (the plugin sets the local cluster's CPUs as ``--cores``); a memory
  request above what a worker has is capped (the job then runs alone on a worker, as the
  local executor would run it); ``gpu``/``gpus`` are abstract counters (limited only by
  ``--resources``) unless the workers advertise GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CPUS = "cpus"
MEM_MB = "mem_mb"
GPUS = "gpus"
#: Snakemake resource names that mean GPUs, first match wins.
GPU_RESOURCE_NAMES = ("gpu", "gpus", "nvidia_gpu")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def job_request(
    threads: int, resources: Mapping[str, Any], advertised: frozenset[str]
) -> dict[str, float]:
    """The Dask resources one job asks for."""
    request = {CPUS: float(max(1, threads))}
    mem = _as_number(resources.get(MEM_MB))
    if MEM_MB in advertised and mem:
        request[MEM_MB] = mem
    for name in GPU_RESOURCE_NAMES:
        gpus = _as_number(resources.get(name))
        if gpus:
            request[GPUS] = gpus
            break
    return request


@dataclass(frozen=True)
class Capacity:
    """The distinct resource sets the cluster's workers offer."""

    offers: tuple[Mapping[str, float], ...]

    @classmethod
    def from_workers(cls, worker_resources: Iterable[Mapping[str, float]]) -> Capacity:
        distinct = {tuple(sorted(r.items())) for r in worker_resources}
        return cls(tuple(dict(items) for items in sorted(distinct)))

    @property
    def advertised(self) -> frozenset[str]:
        return frozenset(name for offer in self.offers for name in offer)

    def fits(self, request: Mapping[str, float]) -> bool:
        return any(
            all(offer.get(name, 0.0) >= amount for name, amount in request.items())
            for offer in self.offers
        )

    def largest(self) -> Mapping[str, float]:
        """The offer with the most CPUs (then memory), for messages."""
        return max(self.offers, key=lambda o: (o.get(CPUS, 0.0), o.get(MEM_MB, 0.0)), default={})


def admit(
    request: Mapping[str, float], capacity: Capacity, cap: bool
) -> tuple[dict[str, float], tuple[str, ...]] | None:
    """What to ask Dask for, and what was capped (resource names); None when the job can
    never run (without ``cap``: as soon as no worker offers the whole request)."""
    if capacity.fits(request):
        return dict(request), ()
    if not cap:
        return None
    advertised = capacity.advertised
    kept = {name: amount for name, amount in request.items() if name in advertised}
    dropped = tuple(name for name in request if name not in advertised)
    for offer in capacity.offers:
        limited = {name: min(amount, offer.get(name, 0.0)) for name, amount in kept.items()}
        if all(limited.values()) and capacity.fits(limited):
            capped = tuple(n for n in kept if limited[n] < kept[n])
            return limited, dropped + capped
    return None


def describe_resources(resources: Mapping[str, float]) -> str:
    if not resources:
        return "nothing"
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def unsatisfiable_message(job_label: str, request: Mapping[str, float], capacity: Capacity) -> str:
    """Why ``request`` can never run here, and what to do about it."""
    return (
        f"{job_label} asks for {describe_resources(request)}, but no Dask worker can ever "
        f"provide that: the largest worker offers {describe_resources(capacity.largest())}. "
        "The job would wait forever, so it fails now. Lower the rule's threads or "
        "resources (e.g. --set-threads RULE=N, --set-resources RULE:mem_mb=N), or give "
        "the workers more (a bigger allocation, --dask-slurm-workers with fewer, "
        "larger workers)."
    )


def capped_message(
    job: Any, asked: Mapping[str, float], capped: Sequence[str], capacity: Capacity
) -> str:
    """Local mode capped what ``job`` asked for (:func:`admit`): which requests, and why
    that is what Snakemake's local executor would do."""
    parts = []
    for resource in capped:
        if resource in capacity.advertised:
            has = capacity.largest().get(resource, 0)
            parts.append(
                f"{resource}={asked[resource]:g} is more than a local worker has ({has:g}), "
                "so it gets a whole worker"
            )
        else:
            name = next(
                (n for n in GPU_RESOURCE_NAMES if job.resources.get(n) == asked[resource]), resource
            )
            parts.append(
                f"{name}={asked[resource]:g} is counted by Snakemake only (limit it with "
                f"--resources {name}=N): the local workers have no GPUs"
            )
    return f"rule {job.name}: {'; '.join(parts)}, as Snakemake's local executor would run it"

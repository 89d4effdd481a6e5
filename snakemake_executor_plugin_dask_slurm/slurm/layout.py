"""Plan how many Dask workers run on each allocated node, grouped into srun steps.

Pure: takes an :class:`~.allocation.Allocation` and a worker count, returns a frozen plan.

One srun step asks every node in it for the same ``--cpus-per-task``, and SLURM refuses a
step that asks a node for more CPUs than the job holds there, so nodes of different sizes
cannot share a step. Nodes are therefore grouped by size (and by how many workers each
runs), one step per group.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..errors import DaskSlurmError
from .allocation import Allocation


class LayoutError(DaskSlurmError):
    """The requested worker count cannot be laid out on the allocation."""


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one size that run the same workers: one srun step, one task per node."""

    nodes: tuple[str, ...]
    cpus: int  # granted per node; what the step asks each node for
    workers_per_node: int
    threads_per_worker: int

    @property
    def total_workers(self) -> int:
        return len(self.nodes) * self.workers_per_node


@dataclass(frozen=True)
class WorkerLayout:
    """The whole plan: one :class:`NodeGroup` per srun step, in node-list order."""

    groups: tuple[NodeGroup, ...]

    @property
    def total_workers(self) -> int:
        return sum(group.total_workers for group in self.groups)

    def describe(self) -> str:
        """One line per step, for the log."""
        return "; ".join(
            f"{len(g.nodes)} node(s) of {g.cpus} CPUs ({','.join(g.nodes)}): "
            f"{g.workers_per_node} worker(s) x {g.threads_per_worker} thread(s) each"
            for g in self.groups
        )


def _size_summary(alloc: Allocation) -> str:
    sizes = Counter(alloc.cpus)
    parts = [f"{count} with {cpus} CPUs" for cpus, count in sorted(sizes.items())]
    return f"{len(alloc.nodes)} node(s): {', '.join(parts)}; {alloc.total_cpus} CPUs in all"


def _check_count(alloc: Allocation, total_workers: int) -> None:
    low, high = len(alloc.nodes), alloc.total_cpus
    if low <= total_workers <= high:
        return
    why = (
        "every allocated node runs at least one worker, or what it holds would sit idle"
        if total_workers < low
        else "every worker needs at least one CPU of its own"
    )
    raise LayoutError(
        f"Cannot run {total_workers} Dask worker(s) on this allocation "
        f"({_size_summary(alloc)}): {why}. Choose a --dask-slurm-workers between {low} "
        f"and {high}, or leave it unset for one worker per node using all its CPUs."
    )


def _split_workers(cpus: tuple[int, ...], total: int) -> list[int]:
    """Split ``total`` workers over nodes in proportion to their CPUs, at least one each.

    Largest-remainder apportionment in exact integer arithmetic, ties going to the earlier
    node. A node whose share is below one gets one worker and the rest are shared among
    the others, so no node sits idle. With ``nodes <= total <= sum(cpus)`` no share
    exceeds a node's CPUs, so every worker has at least one CPU.
    """
    workers = [0] * len(cpus)
    left = list(range(len(cpus)))
    while True:
        size = sum(cpus[i] for i in left)
        small = {i for i in left if total * cpus[i] < size}  # share below one
        if not small:
            break
        for i in small:
            workers[i] = 1
        left = [i for i in left if i not in small]
        total -= len(small)
    for i in left:
        workers[i] = total * cpus[i] // size
    by_remainder = sorted(left, key=lambda i: (-(total * cpus[i] % size), i))
    for i in by_remainder[: total - sum(workers[i] for i in left)]:
        workers[i] += 1
    return workers


def _group(alloc: Allocation, workers: list[int]) -> WorkerLayout:
    """Group nodes by (CPUs, workers per node), groups ordered by first appearance."""
    members: dict[tuple[int, int], list[str]] = {}
    for node, cpus, count in zip(alloc.nodes, alloc.cpus, workers, strict=True):
        members.setdefault((cpus, count), []).append(node)
    return WorkerLayout(
        tuple(
            NodeGroup(tuple(nodes), cpus, count, max(1, cpus // count))
            for (cpus, count), nodes in members.items()
        )
    )


def plan_layout(alloc: Allocation, total_workers: int | None) -> WorkerLayout:
    """Plan the Dask workers for an allocation.

    Default (``total_workers`` None): one worker per node, with one thread per CPU the
    node was granted. Snakemake jobs run as subprocesses, so threads do not contend for
    the GIL; the worker advertises ``cpus`` = its threads, so single-threaded jobs pack
    one per CPU and a multi-threaded job can use the whole node.

    An explicit count is split across nodes in proportion to their size, at least one
    worker per node (see :func:`_split_workers`), each worker getting ``node CPUs //
    workers on that node`` threads (CPUs the division leaves over stay unused). The
    count must lie between the number of nodes (fewer would leave a node idle) and the
    total CPUs (more would give a worker no CPU); outside that range this raises
    :class:`LayoutError` naming the valid range. Steps always ask a node for exactly the
    CPUs it was granted, never more.
    """
    if total_workers is None:
        return _group(alloc, [1] * len(alloc.nodes))
    if isinstance(total_workers, bool) or not isinstance(total_workers, int):
        raise LayoutError(f"The worker count must be a whole number, got {total_workers!r}")
    _check_count(alloc, total_workers)
    return _group(alloc, _split_workers(alloc.cpus, total_workers))

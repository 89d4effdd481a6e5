"""Read what a SLURM allocation granted, from the environment SLURM gives a job.

Pure: every function takes the environment as a plain mapping (and, where a number has to
come from the machine, the caller passes it in), reads nothing else and starts nothing.

The numbers here size the worker pool and are what each ``srun`` step asks SLURM for, so
they must describe what the *job holds*, not how big the machine running this code is: an
``salloc`` shell often runs on a login node that is not part of the allocation at all and
is typically much larger than what the job was granted. Asking a node for more CPUs than
the job holds there is refused by SLURM; asking for fewer wastes what was reserved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import DaskSlurmError
from .hostlist import expand_cpus_per_node, expand_hostlist

_REQUIRED = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST")

#: SLURM's memory sizes (``--mem``, ``SLURM_MEM_PER_NODE``, ``SLURM_MEM_PER_CPU``, a node's
#: ``RealMemory``) are in MiB, 2^20 bytes, though SLURM writes "MB". Snakemake's ``mem_mb``,
#: which a rule asks for and a worker advertises, is in MB, 10^6 bytes.
BYTES_PER_MIB = 2**20
BYTES_PER_MB = 10**6


def mib_to_mb(mib: int) -> int:
    """A SLURM size in MiB as whole MB (10^6 bytes), rounded down: never more than granted."""
    return mib * BYTES_PER_MIB // BYTES_PER_MB


class SlurmEnvironmentError(DaskSlurmError):
    """The environment does not describe a usable SLURM allocation."""


def in_allocation(env: Mapping[str, str]) -> bool:
    """Whether this process runs inside a SLURM allocation (salloc, sbatch or srun)."""
    return bool(env.get("SLURM_JOB_ID", "").strip())


def _positive_int(value: str | None) -> int | None:
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and number > 0 else None


def _slurm_cpus(env: Mapping[str, str], notes: list[str]) -> tuple[int, str] | None:
    """The CPU count SLURM published for this job, or None; unusable values go to notes."""
    on_node = env.get("SLURM_CPUS_ON_NODE")
    count = _positive_int(on_node)
    if count is not None:
        return count, f"SLURM_CPUS_ON_NODE={on_node}"
    if on_node is not None:
        notes.append(f"SLURM_CPUS_ON_NODE={on_node!r} is not a CPU count")
    per_node = env.get("SLURM_JOB_CPUS_PER_NODE")
    if per_node is not None:
        try:
            smallest = min(expand_cpus_per_node(per_node))
        except ValueError as error:
            notes.append(str(error))
        else:
            return smallest, f"smallest entry of SLURM_JOB_CPUS_PER_NODE={per_node}"
    return None


def cpus_for_this_node(
    env: Mapping[str, str], affinity_count: int | None, machine_count: int
) -> tuple[int, str]:
    """CPUs the job holds on a node, and a phrase naming where that number came from.

    Sources, best first (the first usable one wins):

    1. ``SLURM_CPUS_ON_NODE``: what the allocation granted on this node. Set only on an
       allocated node, so an ``salloc`` shell on a login node does not have it.
    2. ``SLURM_JOB_CPUS_PER_NODE``, reduced to its smallest entry: set in that login-node
       shell too. The smallest, because one number that sizes every node must not ask any
       node for more than it holds (SLURM refuses that outright).
    3. ``affinity_count`` (pass ``dask.system.CPU_COUNT``): the machine narrowed by CPU
       affinity and cgroup quota, right when confined but no scheduler published a count.
    4. ``machine_count``: the whole machine, right only when nothing limits the job.
    """
    notes: list[str] = []
    published = _slurm_cpus(env, notes)
    if published is not None:
        return published
    suffix = f" ({'; '.join(notes)})" if notes else ""
    if affinity_count is not None and affinity_count > 0:
        return affinity_count, f"CPUs this process may run on (affinity/cgroup){suffix}"
    if machine_count < 1:
        raise ValueError(f"machine_count must be at least 1, got {machine_count}")
    return machine_count, f"CPUs of this machine{suffix}"


@dataclass(frozen=True)
class Allocation:
    """What one SLURM job was granted, one entry per node in SLURM's node order."""

    job_id: str
    nodes: tuple[str, ...]
    cpus: tuple[int, ...]
    cpus_source: str
    mem_mb: tuple[int, ...] | None  # MB per node, aligned with ``nodes``; None if unknown
    mem_source: str
    gpus_per_node: int | None
    gpu_type: str | None  # "a100" for SLURM_GPUS_PER_NODE=a100:2; None if untyped/mixed
    gpus_source: str
    this_node: str | None  # SLURMD_NODENAME: unset in an salloc shell on a login node

    @property
    def total_cpus(self) -> int:
        return sum(self.cpus)

    @property
    def this_node_is_allocated(self) -> bool:
        """Whether this process runs on one of the allocated nodes (not a login node)."""
        return self.this_node is not None and self.this_node in self.nodes

    @property
    def mem_mb_per_node(self) -> int | None:
        """Smallest per-node memory: the amount every node is sure to have."""
        return min(self.mem_mb) if self.mem_mb else None


def _missing_variables_error(env: Mapping[str, str]) -> SlurmEnvironmentError:
    missing = [name for name in _REQUIRED if not env.get(name, "").strip()]
    found = sorted(f"{k}={v}" for k, v in env.items() if k.startswith("SLURM_"))
    return SlurmEnvironmentError(
        f"Cannot read the SLURM allocation: {' and '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not set. Both {' and '.join(_REQUIRED)} "
        "are needed to know which job this is and which nodes it holds. "
        f"SLURM variables found: {', '.join(found) if found else 'none'}. "
        "Run Snakemake inside an allocation (e.g. 'salloc -N2 --exclusive snakemake ...' "
        "or from an sbatch script), or use --dask-slurm-cluster local."
    )


def _node_names(nodelist: str, hostnames: Sequence[str] | None) -> tuple[str, ...]:
    names = tuple(h.strip() for h in hostnames or () if h.strip())
    if names:
        return names
    try:
        return tuple(expand_hostlist(nodelist))
    except ValueError as error:
        raise SlurmEnvironmentError(
            f"Cannot tell which nodes the job holds: {error}. 'scontrol show hostnames' "
            "was not available to expand it. Put SLURM's scontrol on PATH (e.g. 'module "
            "load slurm') so the node list can be read the way SLURM writes it."
        ) from error


def _per_node_cpus(
    env: Mapping[str, str],
    nodes: tuple[str, ...],
    on_allocated_node: bool,
    affinity_count: int | None,
    machine_count: int,
) -> tuple[tuple[int, ...], str]:
    spec = env.get("SLURM_JOB_CPUS_PER_NODE")
    problem = "SLURM_JOB_CPUS_PER_NODE is not set"
    if spec is not None:
        try:
            counts = expand_cpus_per_node(spec)
            if len(counts) == len(nodes):
                return tuple(counts), f"SLURM_JOB_CPUS_PER_NODE={spec}"
            problem = (
                f"SLURM_JOB_CPUS_PER_NODE={spec} lists {len(counts)} nodes but the "
                f"allocation has {len(nodes)}"
            )
        except ValueError as error:
            problem = str(error)
    if not on_allocated_node and _slurm_cpus(env, []) is None:
        # Only the affinity/machine counts are left, and they describe this machine,
        # which is not one of the nodes (e.g. a login node far larger than the grant).
        raise SlurmEnvironmentError(
            f"Cannot tell how many CPUs the job holds on each node: {problem}, "
            "SLURM_CPUS_ON_NODE is not usable either, and this process is not on an "
            f"allocated node (SLURMD_NODENAME={env.get('SLURMD_NODENAME', 'unset')}), so "
            "this machine's CPU count says nothing about the nodes. Run Snakemake from "
            "the batch script or from an srun step inside the allocation, where SLURM "
            "sets these variables."
        )
    cpus, source = cpus_for_this_node(env, affinity_count, machine_count)
    return (cpus,) * len(nodes), f"{source} for every node, because {problem}"


def granted_memory(
    env: Mapping[str, str], cpus: tuple[int, ...]
) -> tuple[tuple[int, ...] | None, str]:
    """The memory SLURM granted on each node in MB (SLURM's MiB converted), given each
    node's CPUs, and where the number came from; None when the job was granted no size
    (the one memory reader, for local and srun mode alike)."""
    per_node = _positive_int(env.get("SLURM_MEM_PER_NODE"))
    if per_node is not None:
        return (mib_to_mb(per_node),) * len(cpus), f"SLURM_MEM_PER_NODE={per_node} MiB"
    per_cpu = _positive_int(env.get("SLURM_MEM_PER_CPU"))
    if per_cpu is not None:
        per_node_mb = tuple(mib_to_mb(per_cpu * c) for c in cpus)
        return per_node_mb, f"SLURM_MEM_PER_CPU={per_cpu} MiB x CPUs"
    return None, "not known: neither SLURM_MEM_PER_NODE nor SLURM_MEM_PER_CPU gives a size"


def parse_node_memory(text: str) -> dict[str, int]:
    """``RealMemory`` (MiB, as SLURM counts) of each node in ``scontrol show node -o`` output."""
    found = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name, memory = fields.get("NodeName"), _positive_int(fields.get("RealMemory"))
        if name and memory is not None:
            found[name] = memory
    return found


def with_node_memory(alloc: Allocation, memory: Mapping[str, int]) -> Allocation:
    """``alloc`` with each node's ``RealMemory`` (``memory``, MiB) where SLURM granted no
    memory size: a job may then use up to what its node has, and a rule asking for more
    can never run."""
    if alloc.mem_mb is not None or any(node not in memory for node in alloc.nodes):
        return alloc
    return dataclasses.replace(
        alloc,
        mem_mb=tuple(mib_to_mb(memory[node]) for node in alloc.nodes),
        mem_source="RealMemory (MiB) of each node (scontrol show node), as no --mem was granted",
    )


def _parse_gpus(spec: str) -> tuple[int, str | None] | None:
    """``2`` -> (2, None); ``a100:2`` -> (2, "a100"); ``a100:1,v100:1`` -> (2, None)."""
    total, types = 0, set()
    for entry in spec.split(","):
        kind, _, count = entry.strip().rpartition(":")
        number = _positive_int(count)
        if number is None:
            return None
        total += number
        types.add(kind or None)
    return total, types.pop() if len(types) == 1 else None


def _gpus(env: Mapping[str, str]) -> tuple[int | None, str | None, str]:
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        value = env.get(name)
        parsed = _parse_gpus(value) if value else None
        if parsed is not None:
            return parsed[0], parsed[1], f"{name}={value}"
    return None, None, "none: neither SLURM_GPUS_PER_NODE nor SLURM_GPUS_ON_NODE gives a GPU count"


def read_allocation(
    env: Mapping[str, str],
    hostnames: Sequence[str] | None,
    affinity_count: int | None,
    machine_count: int,
) -> Allocation:
    """Read the allocation this process runs in.

    ``hostnames`` is what ``scontrol show hostnames`` printed for the node list, or None
    when it could not be run (then the node list is expanded here). Per-node CPUs come from
    ``SLURM_JOB_CPUS_PER_NODE``; when that is missing or does not have one entry per node,
    every node gets the :func:`cpus_for_this_node` count and ``cpus_source`` says so. On a
    login node with no SLURM CPU count at all this raises rather than size the nodes by
    the login node.
    """
    if any(not env.get(name, "").strip() for name in _REQUIRED):
        raise _missing_variables_error(env)
    nodes = _node_names(env["SLURM_JOB_NODELIST"], hostnames)
    this_node = env.get("SLURMD_NODENAME") or None
    on_node = this_node is not None and this_node in nodes
    cpus, cpus_source = _per_node_cpus(env, nodes, on_node, affinity_count, machine_count)
    mem_mb, mem_source = granted_memory(env, cpus)
    gpus, gpu_type, gpus_source = _gpus(env)
    return Allocation(
        job_id=env["SLURM_JOB_ID"].strip(),
        nodes=nodes,
        cpus=cpus,
        cpus_source=cpus_source,
        mem_mb=mem_mb,
        mem_source=mem_source,
        gpus_per_node=gpus,
        gpu_type=gpu_type,
        gpus_source=gpus_source,
        this_node=this_node,
    )

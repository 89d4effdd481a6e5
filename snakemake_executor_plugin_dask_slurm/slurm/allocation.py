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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product

from ..errors import DaskSlurmError

# A node name piece outside brackets: what SLURM accepts in NodeName.
_NAME_PIECE = re.compile(r"[A-Za-z0-9._-]*")
_CPU_ENTRY = re.compile(r"(\d+)(?:\(x(\d+)\))?")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_REQUIRED = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST")


class SlurmEnvironmentError(DaskSlurmError):
    """The environment does not describe a usable SLURM allocation."""


def in_allocation(env: Mapping[str, str]) -> bool:
    """Whether this process runs inside a SLURM allocation (salloc, sbatch or srun)."""
    return bool(env.get("SLURM_JOB_ID", "").strip())


def expand_cpus_per_node(spec: str) -> list[int]:
    """Expand ``$SLURM_JOB_CPUS_PER_NODE`` into one CPU count per node, in node order.

    SLURM writes runs of equal counts as ``count(xrepeat)``: ``40(x2),96`` is
    ``[40, 40, 96]``. Raises ValueError naming the bad entry when the text does not parse.
    """
    if not spec.strip():
        raise ValueError("SLURM_JOB_CPUS_PER_NODE is empty: it should list CPUs per node")
    counts: list[int] = []
    for entry in spec.strip().split(","):
        match = _CPU_ENTRY.fullmatch(entry)
        if match is None:
            raise ValueError(
                f"cannot read SLURM_JOB_CPUS_PER_NODE={spec!r}: entry {entry!r} is "
                "neither a CPU count like '8' nor a run like '40(x2)'"
            )
        cpus, repeat = int(match[1]), int(match[2] or 1)
        if cpus < 1 or repeat < 1:
            raise ValueError(
                f"cannot read SLURM_JOB_CPUS_PER_NODE={spec!r}: entry {entry!r} has a "
                "zero count; every node holds at least one CPU and a run at least one node"
            )
        counts.extend([cpus] * repeat)
    return counts


def _split_top_level(spec: str) -> list[str]:
    """Split a hostlist at the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(spec):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {spec!r} has nested brackets")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {spec!r} has a ']' without its '['")
        elif char == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"hostlist {spec!r} has a '[' without its ']'")
    items.append(spec[start:])
    return items


def _expand_brackets(body: str, spec: str) -> list[str]:
    """Expand the inside of one bracket group, ``01-03,7`` -> ``01 02 03 7``."""
    numbers: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ValueError(
                f"hostlist {spec!r}: {part!r} in [{body}] is neither a number nor a "
                "range like '1-4' or '01-10'"
            )
        low, high = match[1], match[2] if match[2] is not None else match[1]
        if int(high) < int(low):
            raise ValueError(f"hostlist {spec!r}: range {part!r} runs backwards")
        # SLURM keeps the lower bound's zero padding: n[01-10] is n01 ... n10.
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def _expand_host_item(item: str, spec: str) -> list[str]:
    """Expand one comma-free item such as ``rack[1-2]-n[01-02]``."""
    if not item:
        raise ValueError(f"hostlist {spec!r} has an empty entry")
    pieces = re.split(r"\[([^\]]*)\]", item)  # literal, group, literal, group, ..., literal
    choices: list[list[str]] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            choices.append(_expand_brackets(piece, spec))
        elif _NAME_PIECE.fullmatch(piece):
            choices.append([piece])
        else:
            raise ValueError(f"hostlist {spec!r}: {piece!r} is not part of a node name")
    return ["".join(parts) for parts in product(*choices)]


def expand_hostlist(spec: str) -> list[str]:
    """Expand a SLURM hostlist (``n[1-3]``, ``a[01-03,7],b1``, ``r[1-2]-n[1-2]``).

    The fallback for when ``scontrol show hostnames`` cannot be run. Several bracket groups
    in one name expand with the first group varying slowest, as SLURM does. Raises
    ValueError on malformed text.
    """
    text = spec.strip()
    if not text:
        raise ValueError("hostlist is empty: SLURM_JOB_NODELIST should name the nodes")
    return [host for item in _split_top_level(text) for host in _expand_host_item(item, text)]


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
    mem_mb: tuple[int, ...] | None  # per node, aligned with ``nodes``; None if unknown
    mem_source: str
    gpus_per_node: int | None
    gpu_type: str | None  # "a100" for SLURM_GPUS_PER_NODE=a100:2; None if untyped/mixed
    gpus_source: str
    this_node: str | None  # SLURMD_NODENAME: unset in an salloc shell on a login node

    @property
    def first_node(self) -> str:
        return self.nodes[0]

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


def _memory(env: Mapping[str, str], cpus: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str]:
    per_node = env.get("SLURM_MEM_PER_NODE")
    if _positive_int(per_node) is not None:
        return (int(per_node or 0),) * len(cpus), f"SLURM_MEM_PER_NODE={per_node} (MB)"
    per_cpu = env.get("SLURM_MEM_PER_CPU")
    if _positive_int(per_cpu) is not None:
        mb = int(per_cpu or 0)
        return tuple(mb * c for c in cpus), f"SLURM_MEM_PER_CPU={per_cpu} (MB) x CPUs"
    return None, "not known: neither SLURM_MEM_PER_NODE nor SLURM_MEM_PER_CPU gives a size in MB"


def parse_node_memory(text: str) -> dict[str, int]:
    """``RealMemory`` (MB) of each node in ``scontrol show node -o`` output."""
    found = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name, memory = fields.get("NodeName"), _positive_int(fields.get("RealMemory"))
        if name and memory is not None:
            found[name] = memory
    return found


def with_node_memory(alloc: Allocation, memory: Mapping[str, int]) -> Allocation:
    """``alloc`` with each node's ``RealMemory`` where SLURM granted no memory size: a job
    may then use up to what its node has, and a rule asking for more can never run."""
    if alloc.mem_mb is not None or any(node not in memory for node in alloc.nodes):
        return alloc
    return dataclasses.replace(
        alloc,
        mem_mb=tuple(memory[node] for node in alloc.nodes),
        mem_source="RealMemory of each node (scontrol show node), as no --mem was granted",
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
    mem_mb, mem_source = _memory(env, cpus)
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


#: What a rule's commands keep of SLURM's environment: the allocation's identity, as an
#: sbatch script sees it. Everything else SLURM sets describes the workers' own srun step.
JOB_LEVEL_VARIABLES = frozenset(
    {
        "SLURM_CLUSTER_NAME",
        "SLURM_CONF",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_JOB_GPUS",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_QOS",
        "SLURM_JOB_RESERVATION",
        "SLURM_JOB_UID",
        "SLURM_JOB_USER",
        "SLURM_JOBID",
        "SLURM_MEM_PER_CPU",
        "SLURM_MEM_PER_NODE",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
        "SLURMD_NODENAME",
    }
)


def job_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` of a process inside the workers' srun step, as a rule's command should see it.

    A rule that runs ``srun`` itself (e.g. an MPI rule) must get the allocation, not the
    workers' step: the step's SLURM_NODELIST, SLURM_NTASKS or SLURM_CPUS_PER_TASK would
    otherwise shrink or reshape the rule's own step. Like snakemake-executor-plugin-
    slurm-jobstep, keep only the job-level variables and restore the node list and node
    count the job itself has.
    """
    kept = {
        k: v
        for k, v in env.items()
        if not k.startswith(("SLURM_", "SRUN_", "SBATCH_", "SALLOC_")) or k in JOB_LEVEL_VARIABLES
    }
    if "SLURM_JOB_NODELIST" in kept:
        kept["SLURM_NODELIST"] = kept["SLURM_JOB_NODELIST"]
    if "SLURM_JOB_NUM_NODES" in kept:
        kept["SLURM_NNODES"] = kept["SLURM_JOB_NUM_NODES"]
    return kept


#: The state :func:`allocation_ended` is given for a job SLURM no longer knows (purged).
GONE = "GONE"
#: What a job state other than RUNNING means for the workers, in a user's words.
_ENDED_STATES = {
    "CANCELLED": "it was cancelled (scancel, or by an administrator)",
    "TIMEOUT": "it reached its time limit; ask for more time (--time) and run again: "
    "Snakemake redoes only what is missing",
    "NODE_FAIL": "one of its nodes failed; run again (Snakemake redoes only what is missing)",
    "PREEMPTED": "a job of higher priority preempted it",
    "DEADLINE": "it reached its deadline",
    "OUT_OF_MEMORY": "it ran out of memory",
    "BOOT_FAIL": "a node failed to boot",
    "FAILED": "SLURM ended it as failed",
    "COMPLETED": "it ended",
    "SUSPENDED": "it was suspended",
    GONE: "SLURM no longer lists it, so it ended a while ago",
}


#: While a job is COMPLETING (its nodes still cleaning up, which can last KillWait and
#: the epilog), SLURM shows that instead of why it ended; the reason still tells.
_COMPLETING_REASONS = {
    "TimeLimit": "TIMEOUT",
    "NodeDown": "NODE_FAIL",
    "OutOfMemory": "OUT_OF_MEMORY",
    "DeadLine": "DEADLINE",
}


def parse_job_state(text: str) -> tuple[str, str] | None:
    """``JobState`` and ``Reason`` from what ``scontrol show job -o`` printed, or None."""
    fields = dict(re.findall(r"(?:^|\s)(JobState|Reason)=(\S*)", text))
    state = fields.get("JobState")
    return (state, fields.get("Reason", "None")) if state else None


def allocation_ended(job_id: str, state: tuple[str, str]) -> str | None:
    """A sentence saying the allocation is no longer running and why; None while it runs.

    ``state`` is :func:`parse_job_state`'s answer, or ``(GONE, "None")`` for a job SLURM
    no longer knows.
    """
    name, reason = state
    if name == "RUNNING":
        return None
    meaning = _COMPLETING_REASONS.get(reason) if name == "COMPLETING" else name
    if meaning is None:
        # COMPLETING without a telling reason. Inside the allocation the plugin still
        # runs, so its end was not the batch script's or salloc's command ending: a
        # cancel is what leaves no reason.
        why = (
            "most likely it was cancelled (scancel, or by an administrator), as SLURM "
            f"gives no other reason; 'scontrol show job {job_id}' says more once its "
            "nodes are cleaned up"
        )
    else:
        why = _ENDED_STATES.get(meaning, "SLURM ended it")
    detail = f", reason {reason}" if reason not in ("None", "") else ""
    return f"SLURM allocation {job_id} has ended (state {name}{detail}): {why}"

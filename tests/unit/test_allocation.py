"""Reading a SLURM allocation from its environment: CPU sources, memory, GPUs, Allocation."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.allocation import (
    Allocation,
    SlurmEnvironmentError,
    cpus_for_this_node,
    in_allocation,
    mib_to_mb,
    parse_node_memory,
    read_allocation,
    with_node_memory,
)

# What an `salloc -N3 --exclusive` shell on the login host sees on the test cluster.
SALLOC_LOGIN = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "n[1-3]",
    "SLURM_JOB_CPUS_PER_NODE": "4(x2),8",
}
# The same allocation seen from its batch script, which runs on n1.
BATCH_ON_N1 = SALLOC_LOGIN | {"SLURM_CPUS_ON_NODE": "4", "SLURMD_NODENAME": "n1"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_JOB_ID": "7"}, True),
        ({}, False),
        ({"SLURM_JOB_ID": ""}, False),
        ({"SLURM_JOB_NODELIST": "n1"}, False),
    ],
)
def test_in_allocation(env: dict[str, str], expected: bool) -> None:
    assert in_allocation(env) is expected


# Each source stubbed to a different number, so the winner is visible.
@pytest.mark.parametrize(
    ("env", "affinity", "expected", "source"),
    [
        (
            {"SLURM_CPUS_ON_NODE": "3", "SLURM_JOB_CPUS_PER_NODE": "5(x2),7"},
            11,
            3,
            "SLURM_CPUS_ON_NODE=3",
        ),
        (
            {"SLURM_JOB_CPUS_PER_NODE": "7,5(x2)"},
            11,
            5,
            "smallest entry of SLURM_JOB_CPUS_PER_NODE=7,5(x2)",
        ),
        ({}, 11, 11, "CPUs this process may run on (affinity/cgroup)"),
        ({}, None, 13, "CPUs of this machine"),
        ({}, 0, 13, "CPUs of this machine"),
        (
            {"SLURM_CPUS_ON_NODE": "zero", "SLURM_JOB_CPUS_PER_NODE": "5"},
            11,
            5,
            "smallest entry of SLURM_JOB_CPUS_PER_NODE=5",
        ),
        (
            {"SLURM_CPUS_ON_NODE": "0", "SLURM_JOB_CPUS_PER_NODE": "4(x)"},
            11,
            11,
            "CPUs this process may run on (affinity/cgroup) (SLURM_CPUS_ON_NODE='0' is not a "
            "CPU count; cannot read SLURM_JOB_CPUS_PER_NODE='4(x)': entry '4(x)' is neither "
            "a CPU count like '8' nor a run like '40(x2)')",
        ),
    ],
)
def test_cpus_for_this_node_precedence(
    env: dict[str, str], affinity: int | None, expected: int, source: str
) -> None:
    assert cpus_for_this_node(env, affinity, 13) == (expected, source)


def test_cpus_for_this_node_rejects_bad_machine_count() -> None:
    with pytest.raises(ValueError, match="machine_count must be at least 1"):
        cpus_for_this_node({}, None, 0)


def test_salloc_shell_on_login_node_is_sized_by_the_grant_not_the_machine() -> None:
    # The login host is far larger than the grant and has no SLURM_CPUS_ON_NODE.
    alloc = read_allocation(SALLOC_LOGIN, ["n1", "n2", "n3"], 64, 128)
    assert alloc == Allocation(
        job_id="42",
        nodes=("n1", "n2", "n3"),
        cpus=(4, 4, 8),
        cpus_source="SLURM_JOB_CPUS_PER_NODE=4(x2),8",
        mem_mb=None,
        mem_source="not known: neither SLURM_MEM_PER_NODE nor SLURM_MEM_PER_CPU gives a size",
        gpus_per_node=None,
        gpu_type=None,
        gpus_source="none: neither SLURM_GPUS_PER_NODE nor SLURM_GPUS_ON_NODE gives a GPU count",
        this_node=None,
    )
    assert not alloc.this_node_is_allocated
    assert alloc.total_cpus == 16


@pytest.mark.parametrize(
    ("env", "hostnames", "nodes", "cpus", "source"),
    [
        # scontrol's answer wins over the pure parser.
        (BATCH_ON_N1, ["n1", "n2", "n3"], ("n1", "n2", "n3"), (4, 4, 8), None),
        # No scontrol: the node list is expanded here.
        (BATCH_ON_N1, None, ("n1", "n2", "n3"), (4, 4, 8), None),
        (BATCH_ON_N1, [], ("n1", "n2", "n3"), (4, 4, 8), None),
        (
            BATCH_ON_N1 | {"SLURM_JOB_NODELIST": "c[01-02]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"},
            None,
            ("c01", "c02"),
            (8, 8),
            "SLURM_JOB_CPUS_PER_NODE=8(x2)",
        ),
        # Count does not match the nodes: every node gets this node's count, and says so.
        (
            BATCH_ON_N1 | {"SLURM_JOB_CPUS_PER_NODE": "4(x2)"},
            None,
            ("n1", "n2", "n3"),
            (4, 4, 4),
            "SLURM_CPUS_ON_NODE=4 for every node, because SLURM_JOB_CPUS_PER_NODE=4(x2) "
            "lists 2 nodes but the allocation has 3",
        ),
        # Missing per-node list on an allocated node: this node's grant for all.
        (
            {k: v for k, v in BATCH_ON_N1.items() if k != "SLURM_JOB_CPUS_PER_NODE"},
            None,
            ("n1", "n2", "n3"),
            (4, 4, 4),
            "SLURM_CPUS_ON_NODE=4 for every node, because SLURM_JOB_CPUS_PER_NODE is not set",
        ),
        # On an allocated node with no SLURM count at all: the affinity count (not 128).
        (
            {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURMD_NODENAME": "n1"},
            None,
            ("n1",),
            (64,),
            "CPUs this process may run on (affinity/cgroup) for every node, because "
            "SLURM_JOB_CPUS_PER_NODE is not set",
        ),
        # Login node, list of the wrong length: its smallest entry is still the job's.
        (
            SALLOC_LOGIN | {"SLURM_JOB_CPUS_PER_NODE": "8,4"},
            None,
            ("n1", "n2", "n3"),
            (4, 4, 4),
            "smallest entry of SLURM_JOB_CPUS_PER_NODE=8,4 for every node, because "
            "SLURM_JOB_CPUS_PER_NODE=8,4 lists 2 nodes but the allocation has 3",
        ),
    ],
)
def test_read_allocation_cpus(
    env: dict[str, str],
    hostnames: list[str] | None,
    nodes: tuple[str, ...],
    cpus: tuple[int, ...],
    source: str | None,
) -> None:
    alloc = read_allocation(env, hostnames, 64, 128)
    assert (alloc.nodes, alloc.cpus) == (nodes, cpus)
    assert alloc.cpus_source == (
        source or f"SLURM_JOB_CPUS_PER_NODE={env['SLURM_JOB_CPUS_PER_NODE']}"
    )


def test_batch_script_knows_it_runs_on_an_allocated_node() -> None:
    alloc = read_allocation(BATCH_ON_N1, None, 64, 128)
    assert alloc.this_node == "n1"
    assert alloc.this_node_is_allocated


@pytest.mark.parametrize(
    ("extra", "mem_mb", "source"),
    [
        # SLURM counts in MiB; mem_mb is MB (10^6 bytes): 2000 MiB are 2097 MB.
        ({"SLURM_MEM_PER_NODE": "2000"}, (2097, 2097, 2097), "SLURM_MEM_PER_NODE=2000 MiB"),
        ({"SLURM_MEM_PER_CPU": "500"}, (2097, 2097, 4194), "SLURM_MEM_PER_CPU=500 MiB x CPUs"),
        (
            {"SLURM_MEM_PER_NODE": "3000", "SLURM_MEM_PER_CPU": "500"},
            (3145, 3145, 3145),
            "SLURM_MEM_PER_NODE=3000 MiB",
        ),
        (
            {"SLURM_MEM_PER_NODE": "0", "SLURM_MEM_PER_CPU": "500"},
            (2097, 2097, 4194),
            "SLURM_MEM_PER_CPU=500 MiB x CPUs",
        ),
        (
            {"SLURM_MEM_PER_NODE": "lots"},
            None,
            "not known: neither SLURM_MEM_PER_NODE nor SLURM_MEM_PER_CPU gives a size",
        ),
    ],
)
def test_read_allocation_memory(
    extra: dict[str, str], mem_mb: tuple[int, ...] | None, source: str
) -> None:
    alloc = read_allocation(SALLOC_LOGIN | extra, None, 64, 128)
    assert (alloc.mem_mb, alloc.mem_source) == (mem_mb, source)
    assert alloc.mem_mb_per_node == (min(mem_mb) if mem_mb else None)


@pytest.mark.parametrize(
    ("extra", "gpus", "gpu_type", "source"),
    [
        ({"SLURM_GPUS_PER_NODE": "2"}, 2, None, "SLURM_GPUS_PER_NODE=2"),
        ({"SLURM_GPUS_PER_NODE": "a100:2"}, 2, "a100", "SLURM_GPUS_PER_NODE=a100:2"),
        (
            {"SLURM_GPUS_PER_NODE": "a100:1,v100:2"},
            3,
            None,
            "SLURM_GPUS_PER_NODE=a100:1,v100:2",
        ),
        ({"SLURM_GPUS_ON_NODE": "4"}, 4, None, "SLURM_GPUS_ON_NODE=4"),
        (
            {"SLURM_GPUS_PER_NODE": "a100:2", "SLURM_GPUS_ON_NODE": "4"},
            2,
            "a100",
            "SLURM_GPUS_PER_NODE=a100:2",
        ),
        (
            {"SLURM_GPUS_PER_NODE": "a100:x", "SLURM_GPUS_ON_NODE": "1"},
            1,
            None,
            "SLURM_GPUS_ON_NODE=1",
        ),
        (
            {"SLURM_GPUS_PER_NODE": "0"},
            None,
            None,
            "none: neither SLURM_GPUS_PER_NODE nor SLURM_GPUS_ON_NODE gives a GPU count",
        ),
    ],
)
def test_read_allocation_gpus(
    extra: dict[str, str], gpus: int | None, gpu_type: str | None, source: str
) -> None:
    alloc = read_allocation(SALLOC_LOGIN | extra, None, 64, 128)
    assert (alloc.gpus_per_node, alloc.gpu_type, alloc.gpus_source) == (gpus, gpu_type, source)


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        (
            {},
            [
                "SLURM_JOB_ID and SLURM_JOB_NODELIST are not set",
                "SLURM variables found: none",
                "salloc",
                "sbatch",
                "--dask-slurm-cluster local",
            ],
        ),
        (
            {"SLURM_JOB_ID": "9", "SLURM_CPUS_ON_NODE": "4"},
            [
                "SLURM_JOB_NODELIST is not set",
                "SLURM variables found: SLURM_CPUS_ON_NODE=4, SLURM_JOB_ID=9",
            ],
        ),
        (
            {"SLURM_JOB_NODELIST": "n1"},
            ["SLURM_JOB_ID is not set", "SLURM_JOB_NODELIST=n1"],
        ),
        # Login node, no SLURM CPU count at all: refuse rather than use the login node's.
        (
            {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]"},
            [
                "Cannot tell how many CPUs the job holds on each node",
                "SLURM_JOB_CPUS_PER_NODE is not set",
                "SLURMD_NODENAME=unset",
            ],
        ),
        (
            {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "x"},
            ["entry 'x' is neither", "not on an allocated node"],
        ),
        (
            {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[2-1]", "SLURM_JOB_CPUS_PER_NODE": "4"},
            ["Cannot tell which nodes", "runs backwards", "scontrol"],
        ),
    ],
)
def test_read_allocation_errors(env: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(SlurmEnvironmentError) as caught:
        read_allocation(env, None, 64, 128)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize(("mib", "mb"), [(1, 1), (1000, 1048), (1500, 1572), (2000, 2097)])
def test_a_slurm_size_in_mib_is_converted_to_mb_rounded_down(mib: int, mb: int) -> None:
    assert mib_to_mb(mib) == mb


def test_real_memory_without_a_grant_is_mib_converted_to_mb() -> None:
    text = (
        "NodeName=n1 CPUTot=4 RealMemory=2000 State=IDLE\n"
        "NodeName=n2 CPUTot=4 RealMemory=1000 State=IDLE\n"
    )
    memory = parse_node_memory(text)
    assert memory == {"n1": 2000, "n2": 1000}  # as SLURM counts: MiB
    alloc = read_allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
                             "SLURM_JOB_CPUS_PER_NODE": "4(x2)"}, None, 4, 4)  # fmt: skip
    grown = with_node_memory(alloc, memory)
    assert grown.mem_mb == (2097, 1048)
    assert grown.mem_source.startswith("RealMemory (MiB) of each node")

"""Planning workers over an allocation: defaults, explicit counts, invalid counts."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.allocation import Allocation, read_allocation
from snakemake_executor_plugin_dask_slurm.slurm.layout import (
    LayoutError,
    NodeGroup,
    WorkerLayout,
    plan_layout,
)


def allocation(cpus: dict[str, int]) -> Allocation:
    return Allocation(
        job_id="1",
        nodes=tuple(cpus),
        cpus=tuple(cpus.values()),
        cpus_source="test",
        mem_mb=None,
        mem_source="test",
        gpus_per_node=None,
        gpu_type=None,
        gpus_source="test",
        this_node=None,
    )


HOMOGENEOUS = allocation({"n1": 8, "n2": 8, "n3": 8})
MIXED = allocation({"n1": 4, "n2": 4, "n3": 8})  # SLURM_JOB_CPUS_PER_NODE=4(x2),8
INTERLEAVED = allocation({"a": 8, "b": 4, "c": 8, "d": 4})


@pytest.mark.parametrize(
    ("alloc", "workers", "groups"),
    [
        # Default: one worker per node, threads = granted CPUs, one step per size.
        (HOMOGENEOUS, None, [NodeGroup(("n1", "n2", "n3"), 8, 1, 8)]),
        (MIXED, None, [NodeGroup(("n1", "n2"), 4, 1, 4), NodeGroup(("n3",), 8, 1, 8)]),
        (
            INTERLEAVED,
            None,
            [NodeGroup(("a", "c"), 8, 1, 8), NodeGroup(("b", "d"), 4, 1, 4)],
        ),
        (allocation({"solo": 1}), None, [NodeGroup(("solo",), 1, 1, 1)]),
        # Explicit counts, homogeneous.
        (HOMOGENEOUS, 3, [NodeGroup(("n1", "n2", "n3"), 8, 1, 8)]),
        (HOMOGENEOUS, 6, [NodeGroup(("n1", "n2", "n3"), 8, 2, 4)]),
        (HOMOGENEOUS, 24, [NodeGroup(("n1", "n2", "n3"), 8, 8, 1)]),
        # 7 over three equal nodes: the earlier nodes take the remainder.
        (
            HOMOGENEOUS,
            7,
            [NodeGroup(("n1",), 8, 3, 2), NodeGroup(("n2", "n3"), 8, 2, 4)],
        ),
        # Explicit counts, heterogeneous: in proportion to size.
        (MIXED, 3, [NodeGroup(("n1", "n2"), 4, 1, 4), NodeGroup(("n3",), 8, 1, 8)]),
        (MIXED, 4, [NodeGroup(("n1", "n2"), 4, 1, 4), NodeGroup(("n3",), 8, 2, 4)]),
        (MIXED, 8, [NodeGroup(("n1", "n2"), 4, 2, 2), NodeGroup(("n3",), 8, 4, 2)]),
        (MIXED, 16, [NodeGroup(("n1", "n2"), 4, 4, 1), NodeGroup(("n3",), 8, 8, 1)]),
        # 5 x (4, 4, 8) / 16 = 1.25, 1.25, 2.5: the largest remainder goes to n3.
        (MIXED, 5, [NodeGroup(("n1", "n2"), 4, 1, 4), NodeGroup(("n3",), 8, 3, 2)]),
        # 6 x (4, 4, 8) / 16 = 1.5, 1.5, 3: a tie, won by the earlier node.
        (
            MIXED,
            6,
            [
                NodeGroup(("n1",), 4, 2, 2),
                NodeGroup(("n2",), 4, 1, 4),
                NodeGroup(("n3",), 8, 3, 2),
            ],
        ),
        (
            INTERLEAVED,
            6,
            [NodeGroup(("a", "c"), 8, 2, 4), NodeGroup(("b", "d"), 4, 1, 4)],
        ),
        # A node of one CPU always keeps exactly one worker.
        (
            allocation({"tiny": 1, "big": 100}),
            2,
            [NodeGroup(("tiny",), 1, 1, 1), NodeGroup(("big",), 100, 1, 100)],
        ),
        (
            allocation({"tiny": 1, "big": 100}),
            50,
            [NodeGroup(("tiny",), 1, 1, 1), NodeGroup(("big",), 100, 49, 2)],
        ),
        # Shares below one (0.04, 0.12) become one each; the rest goes to the big node.
        (
            allocation({"a": 1, "b": 3, "c": 100}),
            4,
            [
                NodeGroup(("a",), 1, 1, 1),
                NodeGroup(("b",), 3, 1, 3),
                NodeGroup(("c",), 100, 2, 50),
            ],
        ),
        # Threads round down: 3 workers on 8 CPUs get 2 threads each, never more CPUs.
        (allocation({"n1": 8}), 3, [NodeGroup(("n1",), 8, 3, 2)]),
    ],
)
def test_plan_layout(alloc: Allocation, workers: int | None, groups: list[NodeGroup]) -> None:
    layout = plan_layout(alloc, workers)
    assert layout == WorkerLayout(tuple(groups))
    assert layout.total_workers == (workers if workers is not None else len(alloc.nodes))


ODD = allocation({"p": 5, "q": 7, "r": 7, "s": 2, "t": 16, "u": 1})


@pytest.mark.parametrize(
    ("alloc", "workers"),
    [(a, w) for a in (MIXED, INTERLEAVED, ODD) for w in range(len(a.nodes), a.total_cpus + 1)],
)
def test_every_explicit_count_is_exact_and_fits_each_node(alloc: Allocation, workers: int) -> None:
    layout = plan_layout(alloc, workers)
    assert layout.total_workers == workers
    for group in layout.groups:
        assert 1 <= group.workers_per_node <= group.cpus
        assert group.workers_per_node * group.threads_per_worker <= group.cpus
    # Every node appears exactly once, and a size never needs more than two steps.
    assert sorted(n for g in layout.groups for n in g.nodes) == sorted(alloc.nodes)
    for size in set(alloc.cpus):
        assert sum(g.cpus == size for g in layout.groups) <= 2


def test_salloc_on_login_node_layout_uses_the_grant() -> None:
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_CPUS_PER_NODE": "4(x2),8",
    }
    layout = plan_layout(read_allocation(env, None, 64, 128), None)
    assert layout.groups == (NodeGroup(("n1", "n2"), 4, 1, 4), NodeGroup(("n3",), 8, 1, 8))


@pytest.mark.parametrize(
    ("alloc", "workers", "fragments"),
    [
        (
            MIXED,
            2,
            [
                "Cannot run 2 Dask worker(s)",
                "3 node(s): 2 with 4 CPUs, 1 with 8 CPUs; 16 CPUs in all",
                "every allocated node runs at least one worker",
                "between 3 and 16",
                "leave it unset",
            ],
        ),
        (
            MIXED,
            17,
            ["Cannot run 17 Dask worker(s)", "at least one CPU of its own", "between 3 and 16"],
        ),
        (MIXED, 0, ["Cannot run 0 Dask worker(s)", "between 3 and 16"]),
        (MIXED, -1, ["Cannot run -1 Dask worker(s)"]),
        (MIXED, True, ["must be a whole number, got True"]),
        (MIXED, 2.5, ["must be a whole number, got 2.5"]),
    ],
)
def test_plan_layout_rejects(alloc: Allocation, workers: int, fragments: list[str]) -> None:
    with pytest.raises(LayoutError) as caught:
        plan_layout(alloc, workers)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_describe() -> None:
    assert plan_layout(MIXED, 8).describe() == (
        "2 node(s) of 4 CPUs (n1,n2): 2 worker(s) x 2 thread(s) each; "
        "1 node(s) of 8 CPUs (n3): 4 worker(s) x 2 thread(s) each"
    )

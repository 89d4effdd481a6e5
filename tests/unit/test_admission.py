from __future__ import annotations

from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.admission import (
    Capacity,
    admit,
    describe_resources,
    job_request,
    unsatisfiable_message,
)

ALL = frozenset({"cpus", "mem_mb", "gpus"})
CPUS_ONLY = frozenset({"cpus"})


@pytest.mark.parametrize(
    ("threads", "resources", "advertised", "expected"),
    [
        (1, {}, CPUS_ONLY, {"cpus": 1}),
        (0, {}, CPUS_ONLY, {"cpus": 1}),
        (8, {"mem_mb": 500}, CPUS_ONLY, {"cpus": 8}),  # memory not advertised: not asked
        (2, {"mem_mb": 500}, ALL, {"cpus": 2, "mem_mb": 500}),
        (1, {"mem_mb": "<TBD>"}, ALL, {"cpus": 1}),
        (1, {"gpu": 2}, CPUS_ONLY, {"cpus": 1, "gpus": 2}),  # asked even if none offered
        (1, {"nvidia_gpu": 1}, ALL, {"cpus": 1, "gpus": 1}),
        (1, {"gpus": 0}, ALL, {"cpus": 1}),
        (1, {"gpu": True}, ALL, {"cpus": 1}),
    ],
)
def test_job_request(
    threads: int, resources: dict[str, Any], advertised: frozenset[str], expected: dict[str, float]
) -> None:
    assert job_request(threads, resources, advertised) == expected


CAPACITY = Capacity.from_workers(
    [{"cpus": 4, "mem_mb": 1000}, {"cpus": 4, "mem_mb": 1000}, {"cpus": 8, "mem_mb": 2000}]
)


def test_capacity_keeps_distinct_offers() -> None:
    assert len(CAPACITY.offers) == 2
    assert CAPACITY.advertised == frozenset({"cpus", "mem_mb"})
    assert CAPACITY.largest() == {"cpus": 8, "mem_mb": 2000}


@pytest.mark.parametrize(
    ("request_", "fits"),
    [
        ({"cpus": 1}, True),
        ({"cpus": 8, "mem_mb": 2000}, True),
        ({"cpus": 4, "mem_mb": 1500}, True),  # only the big worker, but it exists
        ({"cpus": 9}, False),
        ({"cpus": 8, "mem_mb": 2001}, False),
        ({"cpus": 1, "gpus": 1}, False),
    ],
)
def test_fits(request_: dict[str, float], fits: bool) -> None:
    assert CAPACITY.fits(request_) is fits


def test_unsatisfiable_message_names_rule_request_and_largest_worker() -> None:
    msg = unsatisfiable_message("rule big (jobid 3, attempt 1)", {"cpus": 16}, CAPACITY)
    assert msg.startswith("rule big (jobid 3, attempt 1) asks for cpus=16, but no Dask worker")
    assert "the largest worker offers cpus=8, mem_mb=2000" in msg
    assert "--set-threads" in msg


def test_format_resources() -> None:
    assert describe_resources({}) == "nothing"
    assert describe_resources({"mem_mb": 1500.0, "cpus": 2.0}) == "cpus=2, mem_mb=1500"


LOCAL = Capacity.from_workers([{"cpus": 2, "mem_mb": 24000}])
NODES = Capacity.from_workers([{"cpus": 4, "mem_mb": 2000}, {"cpus": 8, "mem_mb": 2000, "gpus": 2}])


@pytest.mark.parametrize(
    ("request_", "capacity", "cap", "expected"),
    [
        # fits: asked as is, in every mode
        ({"cpus": 1}, LOCAL, True, ({"cpus": 1}, ())),
        ({"cpus": 8, "gpus": 1}, NODES, False, ({"cpus": 8, "gpus": 1}, ())),
        # srun/attach: what no worker can ever hold is refused
        ({"cpus": 16}, NODES, False, None),
        ({"cpus": 1, "mem_mb": 9000}, NODES, False, None),
        ({"cpus": 4, "gpus": 1}, Capacity.from_workers([{"cpus": 4}]), False, None),
        # local: memory capped at a worker's, GPUs abstract when no worker has any
        ({"cpus": 1, "mem_mb": 1e7}, LOCAL, True, ({"cpus": 1, "mem_mb": 24000}, ("mem_mb",))),
        ({"cpus": 1, "gpus": 1}, LOCAL, True, ({"cpus": 1}, ("gpus",))),
        ({"cpus": 4, "gpus": 3}, NODES, True, ({"cpus": 4, "gpus": 2}, ("gpus",))),
    ],
)
def test_admit(request_: dict[str, float], capacity: Capacity, cap: bool, expected: Any) -> None:
    assert admit(request_, capacity, cap) == expected

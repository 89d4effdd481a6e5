"""Which ready jobs share a Dask task, and how many (dispatch/batching.py)."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.batching import (
    LONG_JOB_SECONDS,
    Batches,
    batch_key,
    batch_size,
    plan,
    room_for,
    scaled,
    split,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec


def spec(key: str, batch: str | None = "r") -> TaskSpec:
    return TaskSpec(key, ("true",), "/", (), f"/logs/{key}.log", None, batch=batch)


def test_room_for_counts_each_resource_and_ignores_the_runway() -> None:
    offered = {"cpus": 64.0, "mem_mb": 10_000.0, "until-1700000000": 1_000_000.0}
    assert room_for({"cpus": 4.0}, offered) == 16
    assert room_for({"cpus": 1.0, "mem_mb": 3000.0}, offered) == 3  # memory binds
    assert room_for({"cpus": 1.0, "until-1700000060": 1.0}, offered) == 64  # runway: no limit
    assert room_for({"cpus": 1.0, "gpus": 1.0}, offered) == 0  # not offered at all
    assert room_for({"cpus": 0.5}, {"cpus": 3.0}) == 6


@pytest.mark.parametrize(
    ("request_", "workers", "jobs", "limit", "size"),
    [
        ({"cpus": 1.0}, [{"cpus": 64.0}] * 16, 64, 16, 4),  # spread: every worker gets some
        ({"cpus": 1.0}, [{"cpus": 64.0}], 64, 16, 16),  # one big worker: the limit
        ({"cpus": 1.0}, [{"cpus": 64.0}], 64, 1, 1),  # batches off
        ({"cpus": 1.0}, [{"cpus": 2.0}], 64, 16, 2),  # a small worker's room
        ({"cpus": 1.0}, [{"cpus": 64.0}, {"cpus": 3.0}], 64, 16, 3),  # the smallest that fits
        ({"cpus": 4.0}, [{"cpus": 64.0}, {"cpus": 2.0}], 64, 16, 16),  # one that cannot: left out
        ({"cpus": 1.0}, [{"cpus": 64.0}] * 16, 3, 16, 1),  # a few jobs: one per task
        ({"gpus": 1.0}, [{"cpus": 64.0}], 64, 16, 1),  # no worker can run one
        ({"cpus": 1.0}, [], 64, 16, 1),  # no worker yet
        ({"cpus": 1.0}, [{"cpus": 64.0}], 1, 16, 1),
    ],
)
def test_batch_size(
    request_: dict[str, float], workers: list[dict[str, float]], jobs: int, limit: int, size: int
) -> None:
    assert batch_size(request_, workers, jobs, limit) == size


def test_split_keeps_the_order_in_near_equal_parts() -> None:
    specs = [spec(f"k{i}") for i in range(10)]
    parts = split(specs, 4)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert [s for p in parts for s in p] == specs
    assert [len(p) for p in split(specs, 1)] == [1] * 10
    assert [len(p) for p in split(specs, 16)] == [10]
    assert split([], 4) == []


def test_a_batch_asks_for_its_jobs_resources_together_under_a_key_of_its_own() -> None:
    assert scaled({"cpus": 2.0, "mem_mb": 100.0, "until-60": 1.0}, 3) == {
        "cpus": 6.0, "mem_mb": 300.0, "until-60": 3.0,
    }  # fmt: skip
    assert batch_key([spec("a-1-a1-t"), spec("a-2-a1-t")]) == "a-1-a1-t-b2"


def test_plan_batches_jobs_of_one_rule_only() -> None:
    jobs = [spec(f"a{i}", "a") for i in range(6)] + [spec("b0", "b")] + [spec("g", None)]
    singles, batches = plan(jobs, {"cpus": 1.0}, [{"cpus": 8.0}], 4)
    assert [[s.key for s in b] for b in batches] == [["a0", "a1", "a2"], ["a3", "a4", "a5"]]
    assert sorted(s.key for s in singles) == ["b0", "g"]  # alone of its rule; never batched
    singles, batches = plan(jobs, {"cpus": 1.0}, [{"cpus": 8.0}], 1)
    assert (len(singles), batches) == (8, [])
    singles, batches = plan(jobs, {"cpus": 1.0}, [{"cpus": 8.0}], 4, long={"a"})
    assert (len(singles), batches) == (8, [])  # a rule seen to be long: one per task


def test_a_rule_with_a_job_that_took_long_no_longer_shares_tasks() -> None:
    batches = Batches()
    batches.handed([spec("a1", "a"), spec("a2", "a"), spec("b1", "b"), spec("c1", "c")])
    batches.ended("a1", LONG_JOB_SECONDS - 0.1)
    batches.ended("b1", None)  # failed: says nothing of its length
    assert batches.long == set()
    batches.ended("a2", LONG_JOB_SECONDS)
    batches.ended("c1", 3600.0)
    assert batches.long == {"a", "c"}
    assert not batches  # nothing pending: nothing to look up at the next end


def test_batches_know_each_pending_job_and_forget_a_batch_with_its_last_job() -> None:
    batches = Batches()
    batch = [spec("x"), spec("y"), spec("z")]
    batches.handed(batch)
    assert batches.add(batch)  # its rule's first batch
    assert not batches.add([spec("v"), spec("w")])
    batches.ended("v")
    batches.ended("w")
    first = batch_key(batch)
    assert not Batches() and batches
    assert batches.jobs_of([first, "single"]) == ["x", "y", "z", "single"]
    assert batches.mates(["y"]) == ["x", "z"] and batches.mates(["single"]) == []
    # A batch's task is cancelled only when it carries nothing else still pending.
    assert batches.carrying_only(["x", "single"]) == ["single"]
    assert batches.carrying_only(["x", "y", "z"]) == [first]
    batches.ended("x")
    assert batches.jobs_of([first]) == ["y", "z"]
    assert batches.carrying_only(["y", "z"]) == [first]
    batches.ended("y")
    batches.ended("z")
    assert not batches
    assert batches.jobs_of([first]) == [first]  # forgotten: a key nobody waits for

"""Snakemake's scheduling rounds as the plugin runs them (snakemake_internals/rounds.py):
one round takes every release made before it, none is lost (not even one that reached
the semaphore the plugin replaced), and a round whose whole, full subsample fitted is
followed by another. The real JobScheduler's rounds: tests/test_scheduling_defaults.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.snakemake_internals import rounds
from snakemake_executor_plugin_dask_slurm.snakemake_internals.guard import original
from snakemake_executor_plugin_dask_slurm.snakemake_internals.rounds import Rounds


def test_one_round_takes_every_release_made_before_it() -> None:
    r = Rounds()
    for _ in range(5):
        r.release()
    assert r.acquire() is True
    assert r.acquire(blocking=False) is False  # the five were one round
    assert r.acquire(timeout=0.05) is False
    r.release()
    assert r.acquire(blocking=False) is True
    assert (r.released, r.acquired) == (6, 2)


def test_a_release_from_another_thread_wakes_a_waiting_round_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The look at the old semaphore an hour apart: only the release can wake the round
    # (a wall-clock bound against the 1-s look failed on a loaded machine).
    monkeypatch.setattr(rounds, "OLD_LOOK_SECONDS", 3600.0)
    r = Rounds()
    woke = threading.Event()
    waiter = threading.Thread(target=lambda: woke.set() if r.acquire() else None)
    waiter.start()
    while not _waiting(r):  # the round waits: the release must wake it
        time.sleep(0.001)
    r.release()
    waiter.join(timeout=60)
    assert woke.is_set() and (r.released, r.acquired) == (1, 1)


def _waiting(r: Rounds) -> bool:
    """Whether a thread waits in ``r.acquire`` (its condition's waiters)."""
    with r._cond:
        return bool(r._cond._waiters)  # type: ignore[attr-defined]


def test_releases_of_the_replaced_semaphore_are_kept() -> None:
    class Scheduler:
        _open_jobs: Any = threading.Semaphore(0)

    scheduler = Scheduler()
    scheduler._open_jobs.release()  # JobScheduler.__init__'s own release
    old = scheduler._open_jobs
    r = rounds.coalesce(scheduler)
    assert scheduler._open_jobs is r and rounds.coalesce(scheduler) is r  # once
    assert r.acquire(blocking=False) is True  # the release made before the swap
    old.release()  # a thread that read the attribute before the swap
    began = time.monotonic()
    assert r.acquire(timeout=5) is True
    assert time.monotonic() - began < rounds.OLD_LOOK_SECONDS + 1


@pytest.mark.parametrize(
    ("selected", "offered", "subsample", "free", "due"),
    [
        (500, 500, 500, {"_nodes": 10, "_cores": 10**6}, True),  # the subsample bound it
        (500, 500, 500, {"_nodes": 0, "_cores": 10**6}, False),  # the slots are full
        (500, 500, 500, {"_cores": 0}, False),
        (500, 500, 500, {}, True),  # no such resource: not a bound
        (499, 500, 500, {"_nodes": 10}, False),  # resources bound it: as Snakemake
        (0, 500, 500, {"_nodes": 10}, False),
        (20, 20, 500, {"_nodes": 10}, False),  # every ready job was offered
        (20, 20, None, {"_nodes": 10}, False),  # no subsample
    ],
)
def test_another_round_only_when_a_whole_full_subsample_fitted(
    selected: int, offered: int, subsample: int | None, free: dict[str, int], due: bool
) -> None:
    assert rounds.refill_due(range(selected), range(offered), subsample, free) is due


class Selecting:
    """What the wrapper reads of a ``JobScheduler``: its semaphore, subsample, resources."""

    def __init__(self, semaphore: Any, free: int) -> None:
        self._open_jobs = semaphore
        self.subsample = 3
        self.resources = {"_nodes": free}

    def job_selector(self, jobs: Any) -> Any:
        chosen = set(list(jobs)[: self.resources["_nodes"]])
        self.resources["_nodes"] -= len(chosen)
        return chosen


def test_the_selector_asks_for_another_round_only_in_the_plugins_rounds() -> None:
    select = rounds.job_selector_replacement(Selecting.job_selector)
    assert original(select) is Selecting.job_selector
    mine = Selecting(Rounds(), free=10)
    assert select(mine, {1, 2, 3}) == {1, 2, 3}
    assert mine._open_jobs.acquire(blocking=False) is True  # slots left: another round
    assert select(mine, {4, 5, 6}) == {4, 5, 6} and mine.resources["_nodes"] == 4
    assert select(mine, {7, 8, 9}) == {7, 8, 9} and mine.resources["_nodes"] == 1
    assert len(select(mine, {10, 11, 12})) == 1  # one slot for three: the slots bound it
    assert mine._open_jobs.released == 3  # after each of the first three only
    snakemakes = Selecting(threading.Semaphore(0), free=10)
    assert select(snakemakes, {1, 2, 3}) == {1, 2, 3}
    assert snakemakes._open_jobs.acquire(blocking=False) is False  # not the plugin's run

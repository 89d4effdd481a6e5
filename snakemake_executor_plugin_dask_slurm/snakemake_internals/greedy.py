"""Snakemake's greedy job selector (snakemake/scheduling/greedy.py): one pass in reward
order instead of one pass per job.

Snakemake 9.27.1's greedy selector (``Scheduler.select_jobs``, snakemake/scheduling/
greedy.py; the plugin's job selection) picks jobs one at a time: each step recomputes,
for every selectable job, how many copies of it still fit (``y``), then takes the job of
highest reward among those that fit. With the subsample of 500 and ``--jobs 100`` every
round's k selected jobs cost k passes over 500 jobs: 0.83 ms of Snakemake's CPU per job at
10,000 thin rules, the largest single part of its per-job work (docs/benchmarks.md).

With Snakemake's defaults (``greediness`` 1.0, jobs prioritised by temp and input files)
and plain non-negative integer resources, every job is one copy that fits or does not, a
job that fits always outranks one that does not (its reward is a tuple, the other's the
empty tuple), and since capacities only shrink, a job that does not fit once never fits
again in the same call. So the step-by-step choice is the same as walking the jobs once in
order of reward (highest first; among equal rewards the lowest index, where ``max`` over
the set of indices stops) and taking each that still fits: the same jobs, in the same
order of the input. Anything else (another greediness, rewards by priority only, a float,
negative or boolean resource, a job that asks for nothing, a reward that is not a tuple of
plain numbers) goes to Snakemake's own function unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .guard import Touch, digest, mark


def targets() -> list[Callable[..., Any]]:
    from snakemake.scheduling.greedy import Scheduler, SchedulerSettings

    return [
        Scheduler.select_jobs,
        Scheduler.job_weight,
        Scheduler.job_reward,
        SchedulerSettings.__post_init__,
    ]


def plain_weights(weights: Sequence[tuple[Any, ...]], capacities: Sequence[Any]) -> bool:
    """Every weight and capacity a non-negative int (not a bool), every job asking for
    something: the cases the one pass is written for."""
    flat = [v for weight in weights for v in weight]
    flat += capacities
    return {type(v) for v in flat} <= {int} and min(flat, default=0) >= 0 and all(map(any, weights))


def plain_rewards(rewards: Sequence[Any]) -> bool:
    """Every reward a non-empty tuple of ints and floats that compare as numbers do."""
    if {type(r) for r in rewards} - {tuple} or not all(rewards):
        return False
    flat = [v for reward in rewards for v in reward]
    kinds = {type(v) for v in flat}
    return kinds <= {int, float} and (float not in kinds or not any(map(math.isnan, flat)))


def _fits(weight: Sequence[int], left: Sequence[int]) -> bool:
    return all(w <= b for w, b in zip(weight, left, strict=True))


def select_in_reward_order(
    weights: Sequence[tuple[int, ...]], capacities: Sequence[int], rewards: Sequence[Any]
) -> list[bool]:
    """Which jobs the greedy heuristic selects when every job is one copy of plain
    non-negative integer weights and every reward a tuple: walk them by reward, highest
    first (ties: lowest index first, as ``max`` over the indices), taking each that fits.
    Capacities only shrink, so a weight that did not fit once never fits again: jobs of
    the same weight (a farm's) are then passed over at the cost of a set lookup."""
    left = list(capacities)
    never: set[tuple[int, ...]] = set()
    fitting = []  # ascending: the stable sort keeps ties in index order
    for j, weight in enumerate(weights):
        if weight not in never:
            if _fits(weight, left):
                fitting.append(j)
            else:
                never.add(weight)
    selected = [False] * len(rewards)
    for j in sorted(fitting, key=rewards.__getitem__, reverse=True):
        weight = weights[j]
        if weight in never:
            continue
        if _fits(weight, left):
            selected[j] = True
            left = [b - w for b, w in zip(left, weight, strict=True)]
        else:
            never.add(weight)
    return selected


def replacement(select_jobs: Any) -> Any:
    """``Scheduler.select_jobs`` as installed, around Snakemake's own."""

    @functools.wraps(select_jobs)
    def select_jobs_in_one_pass(
        self: Any,
        selectable_jobs: Sequence[Any],
        remaining_jobs: Sequence[Any],
        available_resources: Mapping[str, Any],
        input_sizes: dict[Any, int],
    ) -> Any:
        args = (selectable_jobs, remaining_jobs, available_resources, input_sizes)
        if self.settings.greediness != 1 or self.settings.omit_prioritize_by_temp_and_input:
            return select_jobs(self, *args)
        weights = [tuple(self.job_weight(job, available_resources)) for job in selectable_jobs]
        capacities = [available_resources[name] for name in available_resources]
        if not plain_weights(weights, capacities):  # Snakemake's own, which raises where
            return select_jobs(self, *args)  # it would
        rewards = [self.job_reward(job, input_sizes) for job in selectable_jobs]
        if not plain_rewards(rewards):
            return select_jobs(self, *args)
        chosen = select_in_reward_order(weights, capacities, rewards)
        return [job for job, sel in zip(selectable_jobs, chosen, strict=True) if sel]

    return mark(select_jobs_in_one_pass, select_jobs)


def apply() -> None:
    from snakemake.scheduling.greedy import Scheduler

    Scheduler.select_jobs = replacement(Scheduler.select_jobs)


#: ``Scheduler.select_jobs``, ``job_weight`` and ``job_reward`` and the settings'
#: ``__post_init__`` (which makes ``greediness`` a number in [0, 1]) of 9.27.1, whole.
GREEDY_SELECTION = Touch(
    name="greedy_selection",
    kind="fix",
    what="the greedy job selector (snakemake/scheduling/greedy.py)",
    written_for="9.27.1",
    without=(
        "each scheduling round passes over every selectable job once per job it selects "
        "(about 0.8 ms of Snakemake's CPU per job at 10,000 thin rules with --jobs 100)"
    ),
    found=lambda: digest(targets()),
    fingerprint="709a687fce88ec7a4562f73fb9e0398517a4740435e17b775bd6b1fd3c1db426",
    apply=apply,
)
TOUCHES = (GREEDY_SELECTION,)

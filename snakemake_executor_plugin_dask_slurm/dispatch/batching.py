"""Which ready jobs share one Dask task, a batch (:mod:`..worker.batch`): pure.

A batch is exact where its jobs could as well have gone one by one: jobs of one rule
(:attr:`..worker.wire.TaskSpec.batch`, set only on direct-way and warm jobs, never a
group's or a cold one's), with the same resource request and priority, handed over in
one chunk. It asks Dask for their resources together, so a worker runs it only when it has
the slots for all of them, and holds them until its last job ends: jobs of one rule are
expected to take alike, which keeps that short; and once a job of a rule took
:data:`LONG_JOB_SECONDS` or more, that rule's jobs go one per task (a slot held for a
slower job costs more than a task's millisecond saves).

How many per batch (:func:`batch_size`): at most ``--dask-slurm-batch-size``; no more than
the smallest worker that can run the job at all has room for (every such worker can take
any batch); and spread, so that a chunk goes to every worker rather than to a few (a
chunk of 64 on 16 workers: batches of 4). A chunk of a few jobs, Snakemake's hand-over as
single jobs end, is then carried one job per task, as before; a burst, where Dask's
per-task cost is what bounds the farm, is carried in batches.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping, Sequence

from ..worker.clock import is_runway
from ..worker.wire import TaskSpec

#: A rule one of whose jobs took this long (seconds) no longer shares tasks: a batch holds
#: its slots until its slowest job ends, and for jobs this long Dask's per-task cost is
#: nothing to save.
LONG_JOB_SECONDS = 10.0


def room_for(request: Mapping[str, float], offered: Mapping[str, float]) -> int:
    """How many jobs asking ``request`` a worker offering ``offered`` can run at once
    (a runway resource, offered without limit, does not count)."""
    room: float = math.inf
    for name, asked in request.items():
        if asked <= 0 or is_runway(name):
            continue
        room = min(room, offered.get(name, 0.0) // asked)
    return int(room) if room != math.inf else 1 << 30


def batch_size(
    request: Mapping[str, float], workers: Iterable[Mapping[str, float]], jobs: int, limit: int
) -> int:
    """Jobs per batch for ``jobs`` alike jobs asking ``request`` each, given what each live
    worker offers: 1 (no batch) when ``limit`` is 1, or no worker can run one job."""
    if limit <= 1 or jobs <= 1:
        return 1
    rooms = [room for offered in workers if (room := room_for(request, offered)) >= 1]
    if not rooms:
        return 1
    spread = math.ceil(jobs / len(rooms))
    return max(1, min(limit, min(rooms), spread))


def split(specs: Sequence[TaskSpec], size: int) -> list[Sequence[TaskSpec]]:
    """``specs`` in order, cut into as few batches of at most ``size`` as can be, their
    sizes differing by one at most (10 by 4: 4, 3, 3)."""
    if size <= 1 or len(specs) <= 1:
        return [specs[i : i + 1] for i in range(len(specs))]
    count = math.ceil(len(specs) / size)
    base, extra = divmod(len(specs), count)
    out: list[Sequence[TaskSpec]] = []
    start = 0
    for i in range(count):
        end = start + base + (1 if i < extra else 0)
        out.append(specs[start:end])
        start = end
    return out


def batch_key(specs: Sequence[TaskSpec]) -> str:
    """A batch's Dask key: its first job's, marked (no job's key ends so)."""
    return f"{specs[0].key}-b{len(specs)}"


def scaled(request: Mapping[str, float], count: int) -> dict[str, float]:
    """What a batch of ``count`` jobs asking ``request`` each asks for."""
    return {name: asked * count for name, asked in request.items()}


def plan(
    specs: Sequence[TaskSpec],
    request: Mapping[str, float],
    workers: Iterable[Mapping[str, float]],
    limit: int,
    long: Container[str | None] = frozenset(),
) -> tuple[list[TaskSpec], list[Sequence[TaskSpec]]]:
    """Jobs of one request and priority: ``(singles, batches)``, the jobs that go one per
    task (no rule tag, a rule in ``long``, or alone of their rule) and the batches of two or
    more."""
    singles: list[TaskSpec] = []
    by_rule: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        if spec.batch is None or spec.batch in long:
            singles.append(spec)
        else:
            by_rule.setdefault(spec.batch, []).append(spec)
    batches: list[Sequence[TaskSpec]] = []
    offered = list(workers)
    for alike in by_rule.values():
        for part in split(alike, batch_size(request, offered, len(alike), limit)):
            if len(part) == 1:
                singles.append(part[0])
            else:
                batches.append(part)
    return singles, batches


class Batches:
    """Which pending job is in which batch (the dispatcher's lock guards it): the Dask key
    of a batch -> its jobs' keys, a pending job's key -> its batch's Dask key; each pending
    job's rule tag, and the rules seen to be long (:data:`LONG_JOB_SECONDS`)."""

    def __init__(self) -> None:
        self._members: dict[str, tuple[str, ...]] = {}
        self._batch_of: dict[str, str] = {}
        self._tag_of: dict[str, str | None] = {}
        self.long: set[str | None] = set()
        self._told: set[str | None] = set()

    def __bool__(self) -> bool:
        return bool(self._tag_of or self._members)

    def handed(self, specs: Iterable[TaskSpec]) -> None:
        """Jobs handed over (their rules, to learn which are long)."""
        self._tag_of.update((spec.key, spec.batch) for spec in specs)

    def add(self, batch: Sequence[TaskSpec]) -> bool:
        """A batch handed over; whether it is its rule's first."""
        members, dask_key = tuple(spec.key for spec in batch), batch_key(batch)
        self._members[dask_key] = members
        self._batch_of.update(dict.fromkeys(members, dask_key))
        first = batch[0].batch not in self._told
        self._told.add(batch[0].batch)
        return first

    def ended(self, key: str, seconds: float | None = None) -> None:
        """The job ``key`` is no longer pending (its batch forgotten with its last job);
        ``seconds``: how long it took, if it succeeded."""
        tag = self._tag_of.pop(key, None)
        if seconds is not None and seconds >= LONG_JOB_SECONDS:
            self.long.add(tag)
        batch = self._batch_of.pop(key, None)
        if batch is not None and not any(m in self._batch_of for m in self._members[batch]):
            del self._members[batch]

    def jobs_of(self, dask_keys: Iterable[str]) -> list[str]:
        """The jobs of these Dask tasks: a batch's still pending, any other key a job's."""
        found: list[str] = []
        for key in dask_keys:
            members = self._members.get(key)
            if members is None:
                found.append(key)
            else:
                found.extend(m for m in members if m in self._batch_of)
        return found

    def mates(self, keys: Sequence[str]) -> list[str]:
        """The other pending jobs of the batches ``keys`` are in."""
        batches = {self._batch_of[key] for key in keys if key in self._batch_of}
        if not batches:
            return []
        asked = set(keys)
        return [
            m for b in batches for m in self._members[b] if m not in asked and m in self._batch_of
        ]

    def carrying_only(self, keys: Sequence[str]) -> list[str]:
        """The Dask tasks that carry only jobs of ``keys`` (or jobs already ended): a job's
        own task, a batch none of whose other jobs is pending."""
        chosen = set(keys)
        found: list[str] = []
        batches = set()
        for key in keys:
            batch = self._batch_of.get(key)
            if batch is None:
                found.append(key)
            else:
                batches.add(batch)
        for batch in batches:
            if all(m in chosen or m not in self._batch_of for m in self._members[batch]):
                found.append(batch)
        return found

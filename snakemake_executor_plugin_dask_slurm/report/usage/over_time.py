"""Usage over time (pure): the CPUs granted, reserved and used, the jobs running and the
workers in the farm, averaged per time bin (the page's "CPUs over time")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .rows import Attempt, WorkerSpan


@dataclass(frozen=True, slots=True)
class Series:
    """Averages per time bin: bin ``i`` covers ``[start + i·width, start + (i+1)·width)``."""

    start: float
    width: float
    granted: tuple[float, ...]  # CPUs the workers offered
    reserved: tuple[float, ...]  # threads of the running jobs
    used: tuple[float, ...]  # cores the jobs used (each job's CPU time spread evenly)
    running: tuple[float, ...]  # jobs running
    workers: tuple[float, ...]  # workers in the farm


def integrate(
    intervals: Iterable[tuple[float, float, float]], start: float, width: float, bins: int
) -> list[float]:
    """The average of a sum of rates over each bin: each interval ``(begin, end, rate)``
    adds ``rate`` over ``[begin, end)``. Exact, O(n log n): the integral up to ``t`` is
    ``sum(rate * (t - begin) for begin <= t) - sum(rate * (t - end) for end <= t)``, read
    off prefix sums at every bin edge."""
    import numpy as np

    data = np.array(list(intervals), dtype=np.float64).reshape(-1, 3)
    data[:, :2] -= start  # small numbers: epoch seconds times n would lose the fractions
    data[:, :2] = data[:, :2].clip(0.0, width * bins)
    edges = width * np.arange(bins + 1)
    area_to = np.zeros(bins + 1)
    for column, sign in ((0, 1.0), (1, -1.0)):
        order = np.argsort(data[:, column], kind="stable")
        at, rate = data[order, column], data[order, 2]
        rates = np.concatenate(([0.0], np.cumsum(rate)))
        moments = np.concatenate(([0.0], np.cumsum(rate * at)))
        k = np.searchsorted(at, edges, side="right")
        area_to += sign * (edges * rates[k] - moments[k])
    return (np.diff(area_to) / width).tolist()


def series(
    attempts: Sequence[Attempt],
    workers: Sequence[WorkerSpan],
    start: float,
    end: float,
    bins: int = 400,
) -> Series:
    """Usage over ``[start, end]`` in ``bins`` bins."""
    width = max(end - start, 1e-3) / bins
    measured = [a for a in attempts if a.started is not None and a.wall is not None]
    spans = [(s.joined, s.left if s.left is not None else end, s.cpus) for s in workers]

    def jobs(rate: str) -> list[tuple[float, float, float]]:
        out = []
        for a in measured:
            s, w = a.started or 0.0, a.wall or 0.0
            if rate == "threads":
                out.append((s, s + w, float(a.threads)))
            elif rate == "cores":
                out.append((s, s + w, (a.cpu or 0.0) / w if w > 0 else 0.0))
            else:
                out.append((s, s + w, 1.0))
        return out

    return Series(
        start,
        width,
        tuple(integrate(spans, start, width, bins)),
        tuple(integrate(jobs("threads"), start, width, bins)),
        tuple(integrate(jobs("cores"), start, width, bins)),
        tuple(integrate(jobs("count"), start, width, bins)),
        tuple(integrate(((b, e, 1.0) for b, e, _ in spans), start, width, bins)),
    )

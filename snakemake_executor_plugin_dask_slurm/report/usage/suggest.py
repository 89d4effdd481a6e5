"""What a rule should ask for next time, from what its jobs used (pure).

The rules, as docs/further.md states them ("The usage report"):

- **threads**: the cores a job kept busy (its CPU time over its wall time), at the 90th
  percentile of the rule's succeeded jobs, rounded up to a whole thread after a 5 %
  tolerance (2.04 → 2, 2.2 → 3), at least 1. Kept as asked while the rule's CPU
  efficiency is at least :data:`CPU_EFFICIENCY_OK` and its jobs do not use more.
- **mem_mb**: :data:`HEADROOM` x the largest peak RSS of any attempt (failed ones too: an
  attempt killed for memory shows how much it wanted), rounded up by :func:`round_mem_mb`.
  Kept as asked while the jobs used at least :data:`MEMORY_USE_OK` of it and no more.
- **runtime** (minutes): :data:`HEADROOM` x the longest succeeded job, rounded up by
  :func:`round_runtime`. Kept as asked while the longest job used at least
  :data:`TIME_USE_OK` of it and no more.

As Princeton's ``jobstats`` does (1.2 x used, rounded up), every suggestion has headroom;
unlike it, a value is kept when it is close enough, so that a profile does not churn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Suggested memory and runtime are this many times what the jobs used, before rounding.
HEADROOM = 1.2
#: A job using up to this much more than a whole number of cores still fits in it.
THREAD_TOLERANCE = 1.05
#: The percentile of the per-job cores used that threads are sized for.
CORES_PERCENTILE = 90
#: At or above this CPU efficiency (CPU time over wall x threads) threads are kept.
CPU_EFFICIENCY_OK = 0.8
#: At or above this share of mem_mb used (largest peak RSS over mem_mb) mem_mb is kept.
MEMORY_USE_OK = 0.7
#: At or above this share of runtime used (longest job over runtime) runtime is kept.
TIME_USE_OK = 0.6


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A rule's resources for next time; each None where there is no evidence."""

    threads: int | None
    mem_mb: int | None
    runtime: int | None
    #: Which of "threads", "mem_mb", "runtime" differ from what the rule asked.
    changed: tuple[str, ...]
    #: One sentence per resource, with the evidence (for the profile's comments).
    notes: tuple[str, ...]


def round_mem_mb(mb: float) -> int:
    """Round a memory size up: to 50 MB below 1,000 MB, to 500 MB below 10,000 MB, to
    1,000 MB above (at least 50 MB)."""
    step = 50 if mb < 1000 else 500 if mb < 10_000 else 1000
    return max(50, math.ceil(mb / step - 1e-9) * step)


def round_runtime(minutes: float) -> int:
    """Round a runtime up: to whole minutes below an hour, to 5 minutes below 10 hours, to
    30 minutes above (at least 1 minute)."""
    step = 1 if minutes < 60 else 5 if minutes < 600 else 30
    return max(1, math.ceil(minutes / step - 1e-9) * step)


def threads_for(cores: float) -> int:
    """Whole threads for a job keeping ``cores`` busy (see the module's rules)."""
    return max(1, math.ceil(cores / THREAD_TOLERANCE - 1e-9))


def suggest_threads(
    asked: int, cpu_efficiency: float | None, cores_p90: float | None
) -> tuple[int | None, str]:
    if cpu_efficiency is None or cores_p90 is None:
        return None, "threads: no succeeded job to measure"
    fits = threads_for(cores_p90)
    if cpu_efficiency >= CPU_EFFICIENCY_OK and fits <= asked:
        return asked, (
            f"threads: {asked} asked, {cpu_efficiency:.0%} CPU efficiency: keep (at least "
            f"{CPU_EFFICIENCY_OK:.0%})"
        )
    more = ", MORE than asked" if fits > asked else ""
    return fits, (
        f"threads: {asked} asked, {cores_p90:.2f} cores used at p{CORES_PERCENTILE} "
        f"({cpu_efficiency:.0%} CPU efficiency{more}) -> {fits}"
    )


def suggest_mem_mb(
    asked: float | None, peak_mb: float | None, at_most_mb: float | None = None
) -> tuple[int | None, str]:
    """From the largest exact peak and the largest "at most" (a job that stayed below its
    worker's own peak, which the kernel counts as the job's: see ``Usage.rss_floor_kb``)."""
    bound = at_most_mb is not None and (peak_mb is None or at_most_mb > peak_mb)
    if bound:
        peak_mb = at_most_mb
    if peak_mb is None:
        return None, "mem_mb: no attempt measured"
    fits = round_mem_mb(HEADROOM * peak_mb)
    what = f"{peak_mb:,.0f} MB peak"
    if bound:
        what = f"peak at most {peak_mb:,.0f} MB (below its worker's own: no closer figure)"
    if asked is None:
        return fits, f"mem_mb: none asked, {what} -> {fits} ({HEADROOM}x, rounded up)"
    use = peak_mb / asked if asked > 0 else math.inf
    if MEMORY_USE_OK <= use <= 1:
        return int(asked), f"mem_mb: {asked:,.0f} asked, {use:.0%} used at peak: keep"
    if bound and fits >= asked:  # its jobs may well use less: no reason to ask more
        return int(asked), f"mem_mb: {asked:,.0f} asked, {what}: keep"
    more = " (MORE than asked)" if use > 1 and not bound else ""
    return fits, f"mem_mb: {asked:,.0f} asked, {what}{more} -> {fits} ({HEADROOM}x, rounded up)"


def suggest_runtime(asked: float | None, longest_s: float | None) -> tuple[int | None, str]:
    if longest_s is None:
        return None, "runtime: no succeeded job to measure"
    minutes = longest_s / 60
    fits = round_runtime(HEADROOM * minutes)
    longest = duration(longest_s)
    if asked is None:
        return fits, f"runtime: none asked, longest job {longest} -> {fits} min"
    use = minutes / asked if asked > 0 else math.inf
    if TIME_USE_OK <= use <= 1:
        return int(asked), f"runtime: {asked:g} min asked, longest job {longest}: keep"
    more = " (LONGER than asked)" if use > 1 else ""
    return fits, f"runtime: {asked:g} min asked, longest job {longest}{more} -> {fits} min"


def suggest(
    threads: int,
    mem_mb: float | None,
    runtime_min: float | None,
    cpu_efficiency: float | None,
    cores_p90: float | None,
    peak_mb: float | None,
    longest_s: float | None,
    at_most_mb: float | None = None,
) -> Suggestion:
    """A rule's suggestion from its figures (see :mod:`.aggregate`)."""
    t, t_note = suggest_threads(threads, cpu_efficiency, cores_p90)
    m, m_note = suggest_mem_mb(mem_mb, peak_mb, at_most_mb)
    r, r_note = suggest_runtime(runtime_min, longest_s)
    changed = tuple(
        name
        for name, new, old in (
            ("threads", t, threads),
            ("mem_mb", m, mem_mb),
            ("runtime", r, runtime_min),
        )
        if new is not None and (old is None or new != old)
    )
    return Suggestion(t, m, r, changed, (t_note, m_note, r_note))


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"

"""What ``report.html`` shows, as data (pure): every column its plots and tables draw,
which the page's script (``plots.js``, ``page.js``) turns into BokehJS models in the browser.

Python computes what needs the run's facts and the report's words (each attempt's slot on
the timeline, the merged bars, the legend's rules, the header's sentences, the per-rule
figures); the page decides how it looks (figures, glyphs, colours, tooltips, formats).

At scale: the jobs' columns hold every attempt, with categorical columns (rule, worker,
outcome, way) as small integers named in the browser, numbers as little-endian float32
or int32 arrays in base64 (:func:`packed`). Above :data:`MERGE_ABOVE` attempts the
timeline draws consecutive succeeded jobs of one rule on one slot as one bar (drawn one
by one, they would be narrower than a pixel at full view anyway); failed, lost, stopped
and rerun attempts are always drawn one by one.
"""

from __future__ import annotations

import base64
import gzip
import heapq
import html
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...worker.wire import WAYS
from .aggregate import AllocationUse, RuleStats, worker_job_label
from .over_time import series
from .rows import OUTCOMES, Attempt, RunFacts, WorkerSpan
from .suggest import duration
from .words import JOBS_FILE, PROFILE_FILE, RULES_FILE, cpu_time, offender_line

#: Above this many measured attempts the timeline merges runs of succeeded jobs.
MERGE_ABOVE = 20_000
#: Two jobs are merged when the gap between them is under this share of the run's span.
MERGE_GAP = 1 / 4000
#: Bins of the utilisation-over-time plot.
BINS = 400
#: The timeline's legend names at most this many rules (the most frequent first).
LEGEND_RULES = 20
#: How hard the packed columns are compressed: Bokeh's own default.
GZIP_LEVEL = 2
#: The attempts the timeline marks over their rule's colour, each with its own glyph.
MARKED = ("failed", "lost", "stopped")


def page_data(
    attempts: Sequence[Attempt],
    workers: Sequence[WorkerSpan],
    run: RunFacts,
    stats: Sequence[RuleStats],
    alloc: AllocationUse,
) -> dict[str, Any]:
    """Everything the page draws, as JSON-ready values; times in seconds since ``t0``,
    the earliest of the run's start, a worker's joining and a hand-over."""
    t0 = min([run.started, *(w.joined for w in workers), *(a.handed_over for a in attempts)])
    end = max([run.ended, *(a.finished or 0.0 for a in attempts)])
    rules = [s.rule for s in stats]
    jobs, names, lanes = jobs_columns(attempts, workers, rules, t0)
    measured = int((jobs["lane"] >= 0).sum())
    bars = merged(jobs, end - t0) if measured > MERGE_ABOVE else None
    drawn = bars["rule"] if bars is not None else np.where(jobs["lane"] >= 0, jobs["rule"], -1)
    outcome = jobs["outcome"]
    marked = {o: np.flatnonzero(outcome == OUTCOMES.index(o)).tolist() for o in MARKED}
    return {
        "header": header_html(attempts, run, stats, alloc),
        "files": {"jobs": JOBS_FILE, "rules": RULES_FILE},
        "rules": rules,
        "outcomes": list(OUTCOMES),
        "ways": list(WAYS),
        "workers": names,
        "lanes": lanes,
        "jobs": {k: packed(v) if isinstance(v, np.ndarray) else v for k, v in jobs.items()},
        "bars": None if bars is None else {k: packed(v) for k, v in bars.items()},
        "marked": {o: rows for o, rows in marked.items() if rows},
        "reruns": np.flatnonzero(jobs["rerun"] > 0).tolist(),
        "legend": rule_legend(drawn, rules),
        "over_time": over_time_columns(attempts, workers, t0, end),
        "spans": worker_columns(workers, run, t0, end),
        "per_rule": rule_columns(stats),
    }


def packed(values: np.ndarray) -> dict[str, str]:
    """A float32 or int32 column as ``{"dtype", "gzip"}``: its little-endian bytes,
    gzipped (as Bokeh's own serializer does, at its default level), in base64; NaN kept."""
    kind = "float32" if values.dtype.kind == "f" else "int32"
    raw = np.ascontiguousarray(values, dtype="<f4" if kind == "float32" else "<i4").tobytes()
    data = gzip.compress(raw, compresslevel=GZIP_LEVEL, mtime=0)
    return {"dtype": kind, "gzip": base64.b64encode(data).decode("ascii")}


def _finite(values: Iterable[float | None]) -> list[float | None]:
    """Figures for JSON: None (null; NaN in the browser) for a missing, NaN or infinite
    one, which JSON cannot hold."""
    return [None if v is None or not math.isfinite(v) else v for v in values]


# -- the jobs ---------------------------------------------------------------------------


def lanes_of(attempts: Sequence[Attempt], order: dict[str, int]) -> tuple[list[int], list[str]]:
    """A slot (lane) for each measured attempt: on its worker, the lowest lane free when it
    started; the workers' lanes one after another. Returns each attempt's lane (-1 if not
    measured) and the label of each lane."""
    by_worker: dict[str, list[int]] = {}
    for i, a in enumerate(attempts):
        if a.started is not None and a.wall is not None:
            by_worker.setdefault(a.worker, []).append(i)
    lane = [-1] * len(attempts)
    labels: list[str] = []
    for worker in sorted(by_worker, key=lambda w: (order.get(w, len(order)), w)):
        indices = sorted(by_worker[worker], key=lambda i: attempts[i].started or 0.0)
        free: list[int] = []
        busy: list[tuple[float, int]] = []
        used = 0
        for i in indices:
            a = attempts[i]
            while busy and busy[0][0] <= (a.started or 0.0):
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                slot = heapq.heappop(free)
            else:
                slot, used = used, used + 1
            heapq.heappush(busy, ((a.started or 0.0) + (a.wall or 0.0), slot))
            lane[i] = len(labels) + slot
        labels += [f"{worker or '?'} #{n}" for n in range(used)]
    return lane, labels


def _f32(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float32)


def jobs_columns(
    attempts: Sequence[Attempt], workers: Sequence[WorkerSpan], rules: list[str], t0: float
) -> tuple[dict[str, Any], list[str], list[str]]:
    """One column per figure of an attempt (the timeline's and the attempts' table's
    source); the workers' names (the ``worker`` column's categories) and the lanes'
    labels."""
    rule_index = {r: i for i, r in enumerate(rules)}
    worker_names = sorted({a.worker for a in attempts} | {w.name for w in workers})
    worker_index = {w: i for i, w in enumerate(worker_names)}
    order = {w.name: i for i, w in enumerate(sorted(workers, key=lambda w: (w.joined, w.name)))}
    lane, labels = lanes_of(attempts, order)
    outcome_index = {o: i for i, o in enumerate(OUTCOMES)}
    way_index = {w: i for i, w in enumerate(WAYS)}
    cores = [a.cores for a in attempts]
    columns = {
        "rule": np.array([rule_index[a.rule] for a in attempts], dtype=np.int32),
        "jobid": [str(a.jobid) for a in attempts],
        "attempt": np.array([a.attempt for a in attempts], dtype=np.int32),
        "rerun": np.array([a.rerun for a in attempts], dtype=np.int32),
        "wildcards": [a.wildcards for a in attempts],
        "way": np.array([way_index[a.way] for a in attempts], dtype=np.int32),
        "outcome": np.array([outcome_index[a.outcome] for a in attempts], dtype=np.int32),
        "worker": np.array([worker_index[a.worker] for a in attempts], dtype=np.int32),
        "threads": np.array([a.threads for a in attempts], dtype=np.int32),
        "mem_mb": _f32([a.mem_mb for a in attempts]),
        "runtime": _f32([a.runtime_min for a in attempts]),
        "start": _f32([None if a.started is None else a.started - t0 for a in attempts]),
        "end": _f32([None if a.finished is None else a.finished - t0 for a in attempts]),
        "wait": _f32([a.wait for a in attempts]),
        "wall": _f32([a.wall for a in attempts]),
        "cpu": _f32([a.cpu for a in attempts]),
        "cores": _f32(cores),
        "efficiency": _f32(
            [
                None if c is None or not a.threads else 100 * c / a.threads
                for a, c in zip(attempts, cores, strict=True)
            ]
        ),
        "rss": _f32([a.max_rss_mb for a in attempts]),
        "rss_at_most": _f32([a.rss_at_most_mb for a in attempts]),
        "lane": np.array(lane, dtype=np.int32),
    }
    return columns, worker_names, labels


def merged(columns: dict[str, Any], span: float) -> dict[str, np.ndarray]:
    """Runs of succeeded, first-run jobs of one rule on one lane, with gaps under
    MERGE_GAP x span between them, as one bar each."""
    lane, start, end = columns["lane"], columns["start"], columns["end"]
    plain = (columns["outcome"] == 0) & (columns["rerun"] == 0) & (lane >= 0)
    order = np.lexsort((start, lane))
    order = order[plain[order]]
    gap = span * MERGE_GAP
    bars: dict[str, list[Any]] = {k: [] for k in ("lane", "start", "end", "rule", "jobs")}
    for i in order.tolist():
        if (
            bars["lane"]
            and bars["lane"][-1] == lane[i]
            and bars["rule"][-1] == columns["rule"][i]
            and start[i] - bars["end"][-1] <= gap
        ):
            bars["end"][-1] = max(bars["end"][-1], float(end[i]))
            bars["jobs"][-1] += 1
            continue
        bars["lane"].append(int(lane[i]))
        bars["start"].append(float(start[i]))
        bars["end"].append(float(end[i]))
        bars["rule"].append(int(columns["rule"][i]))
        bars["jobs"].append(1)
    return {
        "lane": np.array(bars["lane"], dtype=np.int32),
        "start": np.array(bars["start"], dtype=np.float32),
        "end": np.array(bars["end"], dtype=np.float32),
        "rule": np.array(bars["rule"], dtype=np.int32),
        "jobs": np.array(bars["jobs"], dtype=np.int32),
    }


def rule_legend(drawn: np.ndarray, rules: list[str]) -> dict[str, Any]:
    """The timeline's legend of the rules' colours: its title, and per rule named (the
    :data:`LEGEND_RULES` most drawn) the rule's index and the row of the drawn bars whose
    glyph shows its colour."""
    indices, first, counts = np.unique(drawn, return_index=True, return_counts=True)
    found = [
        (int(c), int(r), int(i)) for r, i, c in zip(indices, first, counts, strict=True) if r >= 0
    ]
    found.sort(key=lambda t: (-t[0], rules[t[1]]))
    title = "rules" if len(found) <= LEGEND_RULES else f"the {LEGEND_RULES} most run (hover)"
    return {"title": title, "items": [[r, i] for _, r, i in found[:LEGEND_RULES]]}


# -- the other plots --------------------------------------------------------------------


def over_time_columns(
    attempts: Sequence[Attempt], workers: Sequence[WorkerSpan], t0: float, end: float
) -> dict[str, list[float | None]]:
    data = series(attempts, workers, t0, end, BINS)
    return {
        "x": _finite(data.start - t0 + (i + 0.5) * data.width for i in range(len(data.granted))),
        "granted": _finite(data.granted),
        "reserved": _finite(data.reserved),
        "used": _finite(data.used),
        "running": _finite(data.running),
    }


def worker_columns(
    workers: Sequence[WorkerSpan], run: RunFacts, t0: float, end: float
) -> dict[str, list[Any]]:
    """One row per worker, in the order they joined; ``group``: the SLURM job its CPUs
    came from (:func:`.aggregate.worker_job_label`)."""
    spans = sorted(workers, key=lambda w: (w.joined, w.name))
    return {
        "name": [w.name for w in spans],
        "joined": _finite(w.joined - t0 for w in spans),
        "left": _finite((w.left if w.left is not None else end) - t0 for w in spans),
        "cpus": _finite(w.cpus for w in spans),
        "host": [w.host for w in spans],
        "group": [worker_job_label(w, run) for w in spans],
        "gone": ["yes" if w.left is not None else "no (at the end)" for w in spans],
    }


def rule_columns(stats: Sequence[RuleStats]) -> dict[str, list[Any]]:
    """Per rule, in ``rules.tsv``'s order: the two per-rule plots' and the rules table's
    figures (None: none)."""
    return {
        "rule": [s.rule for s in stats],
        "attempts": [s.attempts for s in stats],
        "failed": [s.failed + s.lost + s.stopped + s.not_started for s in stats],
        "threads": [s.threads for s in stats],
        "cores": _finite(s.cores_mean for s in stats),
        "p90": _finite(s.cores_p90 for s in stats),
        "eff": _finite(None if s.cpu_efficiency is None else 100 * s.cpu_efficiency for s in stats),
        "mem": _finite(s.mem_mb for s in stats),
        "rss": _finite(s.rss_max_mb for s in stats),
        "at_most": _finite(s.rss_at_most_mb for s in stats),
        "median": _finite(s.rss_p50_mb for s in stats),
        "p50": _finite(s.wall_p50 for s in stats),
        "p95": _finite(s.wall_p95 for s in stats),
        "max": _finite(s.wall_max for s in stats),
        "unused": _finite(s.unused_s for s in stats),
        "s_threads": [s.suggestion.threads for s in stats],
        "s_mem": [s.suggestion.mem_mb for s in stats],
        "s_runtime": [s.suggestion.runtime for s in stats],
        "varies": [", ".join(s.varies) for s in stats],
    }


# -- the header -------------------------------------------------------------------------


def header_html(
    attempts: Sequence[Attempt], run: RunFacts, stats: Sequence[RuleStats], alloc: AllocationUse
) -> str:
    """The page's head: the run's figures, the rules to change, the files beside it."""
    o = alloc.overall
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))
    facts = [f"{len(attempts)} job attempts of {len(stats)} rules", f"started {started}"]
    if run.mode:
        facts.append(f"mode {html.escape(run.mode)}")
    if run.allocation:
        facts.append(f"allocation {html.escape(run.allocation)}")
    items = []
    if o.granted_s > 0:
        items.append(
            f"The farm's CPUs were <b>{o.efficiency or 0:.0%} used</b>: {cpu_time(o.used_s)} of "
            f"{cpu_time(o.granted_s)} granted. Jobs reserved {o.occupancy or 0:.0%} of them "
            f"(threads x wall time) and used {o.used_s / o.reserved_s if o.reserved_s else 0:.0%} "
            "of what they reserved."
            + (" Some worker sizes were not told and are estimated." if o.estimated else "")
        )
    if alloc.head_s is not None:
        items.append(f"First job started {duration(alloc.head_s)} after the run's start.")
    if alloc.tail_s is not None and alloc.tail_idle_s is not None:
        items.append(
            f"Idle tail: after the last job started, the farm waited {duration(alloc.tail_s)} "
            f"for its last jobs ({cpu_time(alloc.tail_idle_s)} granted and unreserved)."
        )
    if run.stop_reason:
        items.append(f"The run stopped early: {html.escape(run.stop_reason)}.")
    offenders = [line for s in stats if (line := offender_line(s))][:10]
    parts = [
        "<h2>dask-slurm usage report</h2>",
        f"<p>{' · '.join(facts)}</p>",
        "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>",
    ]
    if offenders:
        parts.append(
            "<p><b>What to ask for next time</b> (most CPU reserved and unused first):</p>"
        )
        parts.append(
            "<ul>" + "".join(f"<li><code>{html.escape(x)}</code></li>" for x in offenders) + "</ul>"
        )
    parts.append(
        f'<p>Files next to this page: <a href="{JOBS_FILE}">{JOBS_FILE}</a> (every attempt), '
        f'<a href="{RULES_FILE}">{RULES_FILE}</a>, <a href="{PROFILE_FILE}">{PROFILE_FILE}</a> '
        f"(pass it with <code>--profile</code>).</p>"
    )
    return "".join(parts)

"""``report.html``: one standalone page, Bokeh with its JavaScript inlined (no network).

What it shows: the run's figures and the worst offenders; a timeline of every worker slot
(which rule ran when; failures, lost, stopped and rerun attempts marked); CPUs granted,
reserved and used over time; the workers joining and leaving; per rule, threads asked
against cores used and memory asked against peak RSS; every rule and every attempt in
sortable tables.

At scale: the tables hold every row, with categorical columns (rule, worker, outcome, way)
sent as small integers and named in the browser, numbers as float32 binary arrays. Above
:data:`MERGE_ABOVE` attempts, the timeline draws consecutive succeeded jobs of one rule on
one slot as one bar (drawn one by one, they would be narrower than a pixel at full view
anyway); failed, lost, stopped and rerun attempts are always drawn one by one.
"""

from __future__ import annotations

import contextlib
import heapq
import html
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .aggregate import Allocation, RuleStats
from .over_time import Series, series
from .rows import OUTCOMES, Attempt, RunFacts, WorkerSpan
from .suggest import duration
from .words import JOBS_FILE, PROFILE_FILE, RULES_FILE, cpu_time, offender_line

#: Above this many measured attempts the timeline merges runs of succeeded jobs.
MERGE_ABOVE = 20_000
#: Two jobs are merged when the gap between them is under this share of the run's span.
MERGE_GAP = 1 / 4000
#: Bins of the utilisation-over-time plot.
BINS = 400
WIDTH = 1200
#: How attempts that did not succeed are marked over their rule's colour (hatched, with
#: an outline); the rules' palette leaves these colours out.
OUTCOME_COLORS = {
    "done": None,
    "failed": "#d62728",
    "lost": "#000000",
    "stopped": "#7f7f7f",
    "not-started": None,  # never ran: nothing to draw
}
#: Set on <html> by the page itself: data-report-ready once Bokeh rendered, and
#: data-report-error with the message of any JavaScript error (the browser test reads them).
MARKERS = """<script>
(function () {
  var root = document.documentElement;
  function note(text) { root.setAttribute("data-report-error", String(text)); }
  window.addEventListener("error", function (e) { note(e.message || e); });
  window.addEventListener("unhandledrejection", function (e) { note(e.reason); });
  var error = console.error;
  console.error = function () {
    note(Array.prototype.map.call(arguments, String).join(" "));
    return error.apply(console, arguments);
  };
})();
</script>"""


def page_html(
    attempts: Sequence[Attempt],
    workers: Sequence[WorkerSpan],
    run: RunFacts,
    stats: Sequence[RuleStats],
    alloc: Allocation,
) -> str:
    from bokeh.core.templates import FILE
    from bokeh.document import Document
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import CustomJS
    from bokeh.resources import INLINE
    from jinja2 import Template

    t0 = min([run.started, *(w.joined for w in workers), *(a.handed_over for a in attempts)])
    end = max([run.ended, *(a.finished or 0.0 for a in attempts)])
    rules = [s.rule for s in stats]
    jobs = _jobs_columns(attempts, workers, rules, t0)
    source = _source(jobs)  # one copy of every attempt, for the timeline and the table
    timeline = _timeline(jobs, source, rules, end - t0)
    x_range = timeline.x_range
    roots = [
        _header(attempts, run, stats, alloc),
        timeline,
        _over_time(series(attempts, workers, t0, end, BINS), t0, x_range),
        _workers(workers, run, t0, end, x_range),
        _rules_threads(stats),
        _rules_memory(stats),
        _rules_table(stats),
        _jobs_table(jobs, source, rules),
    ]
    doc = Document()
    doc.add_root(column(*roots, sizing_mode="stretch_width"))
    doc.js_on_event(
        "document_ready",
        CustomJS(code="document.documentElement.setAttribute('data-report-ready', '1')"),
    )
    template = Template("{% extends base %}{% block preamble %}" + MARKERS + "{% endblock %}")
    title = (
        f"dask-slurm usage report, {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))}"
    )
    return _without_validation(
        lambda: file_html(doc, INLINE, title, template=template, template_variables={"base": FILE})
    )


def _without_validation(render: Callable[[], str]) -> str:
    """``render()`` with Bokeh's integrity checks off (its ``BOKEH_VALIDATE_DOC``
    setting), then unset again (nothing else in Snakemake's process sets it): they only
    log (and find nothing on this page), and walk every model once more: 15-25 % of the
    page's CPU at the end of the run."""
    from bokeh.settings import settings

    setting = settings.perform_document_validation
    setting.set_value(False)
    try:
        return render()
    finally:
        setting.unset_value()


def warm_up() -> None:
    """Import Bokeh (what the page needs of it), on a thread while the run's jobs run, so
    that the page at the end costs only its building (docs/architecture.md, "The report
    at the end of a run"). Never raises: the page at the end says what went wrong, if
    anything."""
    with contextlib.suppress(Exception):
        import bokeh.core.templates
        import bokeh.embed
        import bokeh.models
        import bokeh.plotting
        import bokeh.resources  # noqa: F401


# -- the data ---------------------------------------------------------------------------


def _lanes(attempts: Sequence[Attempt], order: dict[str, int]) -> tuple[list[int], list[str]]:
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


def _jobs_columns(
    attempts: Sequence[Attempt], workers: Sequence[WorkerSpan], rules: list[str], t0: float
) -> dict[str, Any]:
    rule_index = {r: i for i, r in enumerate(rules)}
    worker_names = sorted({a.worker for a in attempts} | {w.name for w in workers})
    worker_index = {w: i for i, w in enumerate(worker_names)}
    order = {w.name: i for i, w in enumerate(sorted(workers, key=lambda w: (w.joined, w.name)))}
    lane, labels = _lanes(attempts, order)
    outcome_index = {o: i for i, o in enumerate(OUTCOMES)}
    cores = [a.cores for a in attempts]
    return {
        "rule": np.array([rule_index[a.rule] for a in attempts], dtype=np.int32),
        "jobid": [str(a.jobid) for a in attempts],
        "attempt": np.array([a.attempt for a in attempts], dtype=np.int32),
        "rerun": np.array([a.rerun for a in attempts], dtype=np.int32),
        "wildcards": [a.wildcards for a in attempts],
        "way": np.array([a.way == "general" for a in attempts], dtype=np.int32),
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
        # not columns: what the plots need besides
        "_workers": worker_names,
        "_lanes": labels,
    }


def _source(columns: dict[str, Any]) -> Any:
    from bokeh.models import ColumnDataSource

    return ColumnDataSource({k: v for k, v in columns.items() if not k.startswith("_")})


def _palette(n: int) -> list[str]:
    """``n`` colours for rules: Category20's strong ones first, then its light ones,
    without its reds and greys (they mark failed and stopped attempts)."""
    from bokeh.palettes import Category20

    marks = {"#d62728", "#ff9896", "#7f7f7f", "#c7c7c7"}
    colors = [c for c in (*Category20[20][0::2], *Category20[20][1::2]) if c not in marks]
    return [colors[i % len(colors)] for i in range(max(n, 1))]


def _names_formatter(names: Sequence[str]) -> Any:
    """Shows a categorical column's integer as its name (hover)."""
    from bokeh.models import CustomJSHover

    return CustomJSHover(args={"names": list(names)}, code="return names[value] ?? String(value)")


# -- the plots --------------------------------------------------------------------------


def _header(
    attempts: Sequence[Attempt], run: RunFacts, stats: Sequence[RuleStats], alloc: Allocation
) -> Any:
    from bokeh.models.widgets import Div

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
    return Div(text="".join(parts), sizing_mode="stretch_width")


def _merged(columns: dict[str, Any], span: float) -> dict[str, Any]:
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


def _only(mask: np.ndarray) -> Any:
    """A view of the rows where ``mask`` is true (their indices: few, as a rule)."""
    from bokeh.models import CDSView, IndexFilter

    return CDSView(filter=IndexFilter(indices=np.flatnonzero(mask).tolist()))


def _timeline(columns: dict[str, Any], jobs: Any, rules: list[str], span: float) -> Any:
    from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper, Range1d
    from bokeh.plotting import figure

    labels = columns["_lanes"]
    height = min(900, max(250, 14 * len(labels) + 80))
    plot = figure(
        title="Every worker slot: which rule ran when"
        " (failed, lost, stopped and rerun attempts marked)",
        height=height,
        width=WIDTH,
        sizing_mode="stretch_width",
        x_axis_label="seconds since the run's start",
        y_range=Range1d(start=max(len(labels), 1) - 0.5, end=-0.5),
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        active_scroll="xwheel_zoom",
        output_backend="canvas",
    )
    colors = LinearColorMapper(
        palette=_palette(len(rules)), low=-0.5, high=max(len(rules), 1) - 0.5
    )
    rule_names = _names_formatter(rules)
    measured = int((columns["lane"] >= 0).sum())
    if measured > MERGE_ABOVE:
        merged = _merged(columns, span)
        bars = ColumnDataSource(merged)
        drawn_rules = merged["rule"]
        plain = plot.hbar(
            y="lane", left="start", right="end", height=0.8, source=bars,
            fill_color={"field": "rule", "transform": colors}, line_color=None,
        )  # fmt: skip
        tips = [
            ("rule", "@rule{custom}"),
            ("jobs", "@jobs"),
            ("from", "@start{0.0} s"),
            ("to", "@end{0.0} s"),
        ]
        plot.add_tools(
            HoverTool(renderers=[plain], tooltips=tips, formatters={"@rule": rule_names})
        )
    else:
        drawn_rules = np.where(columns["lane"] >= 0, columns["rule"], -1)
        plain = plot.hbar(
            y="lane", left="start", right="end", height=0.8, source=jobs,
            fill_color={"field": "rule", "transform": colors}, line_color=None,
        )  # fmt: skip
        plot.add_tools(
            HoverTool(
                renderers=[plain],
                tooltips=_job_tooltips(),
                formatters={"@rule": rule_names, "@outcome": _names_formatter(OUTCOMES)},
            )
        )
    for index, outcome in enumerate(OUTCOMES):
        color = OUTCOME_COLORS[outcome]
        if color is None or not (columns["outcome"] == index).any():
            continue
        mask = columns["outcome"] == index
        plot.hbar(
            y="lane", left="start", right="end", height=0.8, source=jobs,
            view=_only(mask), fill_color=None,
            line_color=color, line_width=2, hatch_pattern="/", hatch_color=color,
            legend_label=outcome,
        )  # fmt: skip
    if (columns["rerun"] > 0).any():
        plot.hbar(
            y="lane", left="start", right="end", height=0.8, source=jobs,
            view=_only(columns["rerun"] > 0), fill_color=None,
            line_color="black", line_dash="dashed", line_width=2, legend_label="rerun",
        )  # fmt: skip
    ticks = [i for i, label in enumerate(labels) if label.endswith(" #0")]
    plot.yaxis.ticker = FixedTicker(ticks=ticks)
    plot.yaxis.major_label_overrides = {i: labels[i].removesuffix(" #0") for i in ticks}
    plot.ygrid.ticker = FixedTicker(ticks=[t - 0.5 for t in ticks])
    if plot.legend:
        plot.legend.location = "top_right"
        plot.legend.click_policy = "hide"
    _rule_legend(plot, plain, drawn_rules, rules)
    return plot


#: The timeline's legend names at most this many rules (the most frequent first).
LEGEND_RULES = 20


def _rule_legend(plot: Any, renderer: Any, drawn: np.ndarray, rules: list[str]) -> None:
    """A legend of the rules' colours, beside the timeline: each item shows the glyph of
    one row of that rule (``LegendItem.index``)."""
    from bokeh.models.annotations import Legend, LegendItem

    indices, first, counts = np.unique(drawn, return_index=True, return_counts=True)
    found = [
        (int(c), int(r), int(i)) for r, i, c in zip(indices, first, counts, strict=True) if r >= 0
    ]
    found.sort(key=lambda t: (-t[0], rules[t[1]]))
    items = [
        LegendItem(label=rules[r], renderers=[renderer], index=i)
        for _, r, i in found[:LEGEND_RULES]
    ]
    title = "rules" if len(found) <= LEGEND_RULES else f"the {LEGEND_RULES} most run (hover)"
    if items:
        plot.add_layout(Legend(items=items, click_policy="none", title=title), "right")


def _job_tooltips() -> list[tuple[str, str]]:
    return [
        ("rule", "@rule{custom}"),
        ("job", "@jobid (attempt @attempt)"),
        ("wildcards", "@wildcards"),
        ("outcome", "@outcome{custom}"),
        ("wall", "@wall{0.000} s"),
        ("cores used", "@cores{0.00} of @threads"),
        ("peak RSS", "@rss{0,0} MB (at most @rss_at_most{0,0})"),
    ]


def _over_time(data: Series, t0: float, x_range: Any) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    x = [data.start - t0 + (i + 0.5) * data.width for i in range(len(data.granted))]
    source = ColumnDataSource(
        {
            "x": x,
            "granted": list(data.granted),
            "reserved": list(data.reserved),
            "used": list(data.used),
            "running": list(data.running),
        }
    )
    plot = figure(
        title="CPUs over time: granted (the workers'), reserved by running jobs (threads),"
        " used (CPU time)",
        height=260,
        width=WIDTH,
        sizing_mode="stretch_width",
        x_range=x_range,
        x_axis_label="seconds since the run's start",
        y_axis_label="CPUs",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
    )
    plot.varea(
        x="x", y1=0, y2="granted", source=source, fill_color="#dddddd", legend_label="granted"
    )
    plot.line(
        x="x", y="reserved", source=source, line_width=2, color="#1f77b4", legend_label="reserved"
    )
    plot.line(x="x", y="used", source=source, line_width=2, color="#2ca02c", legend_label="used")
    plot.add_tools(
        HoverTool(
            tooltips=[
                ("granted", "@granted{0.0}"),
                ("reserved", "@reserved{0.0}"),
                ("used", "@used{0.0}"),
                ("jobs running", "@running{0.0}"),
            ],
            mode="vline",
        )
    )
    plot.legend.location = "top_right"
    return plot


def _workers(
    workers: Sequence[WorkerSpan], run: RunFacts, t0: float, end: float, x_range: Any
) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool, Range1d
    from bokeh.plotting import figure

    from .aggregate import worker_job_label

    spans = sorted(workers, key=lambda w: (w.joined, w.name))
    groups = sorted({worker_job_label(w, run) for w in spans})
    palette = _palette(len(groups))
    source = ColumnDataSource(
        {
            "y": list(range(len(spans))),
            "name": [w.name for w in spans],
            "joined": [w.joined - t0 for w in spans],
            "left": [(w.left if w.left is not None else end) - t0 for w in spans],
            "cpus": [w.cpus for w in spans],
            "host": [w.host for w in spans],
            "group": [worker_job_label(w, run) for w in spans],
            "color": [palette[groups.index(worker_job_label(w, run))] for w in spans],
            "gone": ["yes" if w.left is not None else "no (at the end)" for w in spans],
        }
    )
    plot = figure(
        title="Workers joining and leaving, coloured by the SLURM job their CPUs came from",
        height=min(500, max(160, 18 * len(spans) + 80)),
        width=WIDTH,
        sizing_mode="stretch_width",
        x_range=x_range,
        y_range=Range1d(start=max(len(spans), 1) - 0.5, end=-0.5),
        x_axis_label="seconds since the run's start",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
    )
    bars = plot.hbar(
        y="y",
        left="joined",
        right="left",
        height=0.7,
        color="color",
        source=source,
        legend_field="group",
    )
    plot.scatter(x="joined", y="y", marker="triangle", size=8, color="black", source=source)
    plot.scatter(x="left", y="y", marker="x", size=8, color="black", source=source)
    plot.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[
                ("worker", "@name on @host"),
                ("CPUs", "@cpus"),
                ("from", "@group"),
                ("joined", "@joined{0.0} s"),
                ("left", "@left{0.0} s (@gone)"),
            ],
        )
    )
    plot.yaxis.visible = False
    plot.legend.location = "top_right"
    return plot


def _rule_figure(title: str, rules: list[str], x_label: str) -> Any:
    from bokeh.models import FactorRange
    from bokeh.plotting import figure

    return figure(
        title=title,
        y_range=FactorRange(factors=list(reversed(rules))),
        height=min(1200, max(200, 22 * len(rules) + 90)),
        width=WIDTH,
        sizing_mode="stretch_width",
        x_axis_label=x_label,
        tools="xpan,xwheel_zoom,reset,save",
    )


def _rules_threads(stats: Sequence[RuleStats]) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool

    rules = [s.rule for s in stats]
    plot = _rule_figure(
        "Per rule: threads asked (light) against cores used on average (dark) and at p90 (tick)",
        rules,
        "cores",
    )
    source = ColumnDataSource(
        {
            "rule": rules,
            "asked": [s.threads for s in stats],
            "mean": [s.cores_mean if s.cores_mean is not None else np.nan for s in stats],
            "p90": [s.cores_p90 if s.cores_p90 is not None else np.nan for s in stats],
            "eff": [
                100 * s.cpu_efficiency if s.cpu_efficiency is not None else np.nan for s in stats
            ],
            "suggested": [
                s.suggestion.threads if s.suggestion.threads is not None else np.nan for s in stats
            ],
        }
    )
    plot.hbar(y="rule", right="asked", height=0.8, source=source, color="#aec7e8")
    used = plot.hbar(y="rule", right="mean", height=0.5, source=source, color="#1f77b4")
    plot.scatter(
        x="p90", y="rule", marker="dash", size=14, angle=1.5708, color="black", source=source
    )
    plot.add_tools(
        HoverTool(
            renderers=[used],
            tooltips=[
                ("rule", "@rule"),
                ("threads asked", "@asked"),
                ("cores used", "@mean{0.00} (p90 @p90{0.00})"),
                ("CPU efficiency", "@eff{0} %"),
                ("suggested", "@suggested"),
            ],
        )
    )
    return plot


def _rules_memory(stats: Sequence[RuleStats]) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool

    rules = [s.rule for s in stats]
    plot = _rule_figure(
        "Per rule: mem_mb asked (light; none: no bar) against peak RSS: largest (dark),"
        " median (dot), at most (hatched: jobs that stayed below their worker's own peak);"
        " all in MB (10^6 bytes, the unit of Snakemake's mem_mb)",
        rules,
        "MB (10^6 bytes)",
    )
    source = ColumnDataSource(
        {
            "rule": rules,
            "asked": [s.mem_mb if s.mem_mb is not None else np.nan for s in stats],
            "peak": [s.rss_max_mb if s.rss_max_mb is not None else np.nan for s in stats],
            "at_most": [
                s.rss_at_most_mb if s.rss_at_most_mb is not None else np.nan for s in stats
            ],
            "median": [s.rss_p50_mb if s.rss_p50_mb is not None else np.nan for s in stats],
            "suggested": [
                s.suggestion.mem_mb if s.suggestion.mem_mb is not None else np.nan for s in stats
            ],
        }
    )
    plot.hbar(y="rule", right="asked", height=0.8, source=source, color="#ffbb78")
    at_most = plot.hbar(
        y="rule", right="at_most", height=0.5, source=source, fill_color=None,
        line_color="#ff7f0e", hatch_pattern="/", hatch_color="#ff7f0e",
    )  # fmt: skip
    peak = plot.hbar(y="rule", right="peak", height=0.5, source=source, color="#ff7f0e")
    plot.scatter(x="median", y="rule", size=7, color="black", source=source)
    plot.add_tools(
        HoverTool(
            renderers=[peak, at_most],
            tooltips=[
                ("rule", "@rule"),
                ("mem_mb asked", "@asked{0,0}"),
                ("peak RSS", "@peak{0,0} MB (median @median{0,0})"),
                ("peak at most", "@at_most{0,0} MB (jobs below their worker's own peak)"),
                ("suggested", "@suggested"),
            ],
        )
    )
    return plot


def _template(names: Sequence[str]) -> Any:
    """A table cell showing a categorical integer as its (escaped) name."""
    from bokeh.models.widgets import HTMLTemplateFormatter

    return HTMLTemplateFormatter(template=f"<%- {json.dumps(list(names))}[value] %>")


def _rules_table(stats: Sequence[RuleStats]) -> Any:
    from bokeh.models import ColumnDataSource
    from bokeh.models.widgets import DataTable, NumberFormatter, TableColumn

    def nan(v: float | None) -> float:
        return np.nan if v is None else v

    data = {
        "rule": [s.rule for s in stats],
        "attempts": [s.attempts for s in stats],
        "failed": [s.failed + s.lost + s.stopped + s.not_started for s in stats],
        "threads": [s.threads for s in stats],
        "cores": [nan(s.cores_mean) for s in stats],
        "eff": [nan(None if s.cpu_efficiency is None else 100 * s.cpu_efficiency) for s in stats],
        "mem": [nan(s.mem_mb) for s in stats],
        "rss": [nan(s.rss_max_mb) for s in stats],
        "at_most": [nan(s.rss_at_most_mb) for s in stats],
        "p50": [nan(s.wall_p50) for s in stats],
        "p95": [nan(s.wall_p95) for s in stats],
        "max": [nan(s.wall_max) for s in stats],
        "unused": [s.unused_s for s in stats],
        "s_threads": [nan(s.suggestion.threads) for s in stats],
        "s_mem": [nan(s.suggestion.mem_mb) for s in stats],
        "s_runtime": [nan(s.suggestion.runtime) for s in stats],
        "varies": [", ".join(s.varies) for s in stats],
    }
    n0, n2 = NumberFormatter(format="0,0"), NumberFormatter(format="0.00")
    columns = [
        TableColumn(field="rule", title="rule"),
        TableColumn(field="attempts", title="attempts"),
        TableColumn(field="failed", title="not done"),
        TableColumn(field="threads", title="threads"),
        TableColumn(field="cores", title="cores used", formatter=n2),
        TableColumn(field="eff", title="CPU eff. %", formatter=n0),
        TableColumn(field="mem", title="mem_mb", formatter=n0),
        TableColumn(field="rss", title="peak MB", formatter=n0),
        TableColumn(field="at_most", title="or at most", formatter=n0),
        TableColumn(field="p50", title="wall p50 s", formatter=n2),
        TableColumn(field="p95", title="p95 s", formatter=n2),
        TableColumn(field="max", title="max s", formatter=n2),
        TableColumn(field="unused", title="unused CPU-s", formatter=n0),
        TableColumn(field="s_threads", title="→ threads", formatter=n0),
        TableColumn(field="s_mem", title="→ mem_mb", formatter=n0),
        TableColumn(field="s_runtime", title="→ runtime min", formatter=n0),
        TableColumn(field="varies", title="varies widely"),
    ]
    from bokeh.layouts import column
    from bokeh.models.widgets import Div

    table = DataTable(
        source=ColumnDataSource(data), columns=columns, height=min(600, 28 * len(stats) + 40),
        sizing_mode="stretch_width", index_position=None,
    )  # fmt: skip
    return column(
        Div(text=f"<h3>Rules ({len(stats)}), as in {RULES_FILE}</h3>"),
        table,
        sizing_mode="stretch_width",
    )


def _jobs_table(columns: dict[str, Any], jobs: Any, rules: list[str]) -> Any:
    from bokeh.layouts import column
    from bokeh.models.widgets import DataTable, Div, NumberFormatter, TableColumn

    n2, n3 = NumberFormatter(format="0.00"), NumberFormatter(format="0.000")
    n0 = NumberFormatter(format="0,0")
    table_columns = [
        TableColumn(field="rule", title="rule", formatter=_template(rules)),
        TableColumn(field="jobid", title="job"),
        TableColumn(field="attempt", title="attempt"),
        TableColumn(field="rerun", title="rerun"),
        TableColumn(field="wildcards", title="wildcards"),
        TableColumn(field="way", title="way", formatter=_template(["direct", "general"])),
        TableColumn(field="outcome", title="outcome", formatter=_template(OUTCOMES)),
        TableColumn(field="worker", title="worker", formatter=_template(columns["_workers"])),
        TableColumn(field="threads", title="threads"),
        TableColumn(field="mem_mb", title="mem_mb", formatter=n0),
        TableColumn(field="start", title="start s", formatter=n2),
        TableColumn(field="wait", title="wait s", formatter=n3),
        TableColumn(field="wall", title="wall s", formatter=n3),
        TableColumn(field="cpu", title="CPU s", formatter=n3),
        TableColumn(field="cores", title="cores", formatter=n2),
        TableColumn(field="efficiency", title="CPU eff. %", formatter=n0),
        TableColumn(field="rss", title="peak MB", formatter=n0),
        TableColumn(field="rss_at_most", title="peak at most MB", formatter=n0),
    ]
    count = len(columns["jobid"])
    table = DataTable(
        source=jobs, columns=table_columns, height=500, sizing_mode="stretch_width",
        index_position=None,
    )  # fmt: skip
    title = Div(text=f"<h3>Every attempt ({count}), as in {JOBS_FILE}; click a title to sort</h3>")
    return column(title, table, sizing_mode="stretch_width")

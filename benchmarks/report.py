"""results.md and the PNG plots, from the run results (medians over repeats)."""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cpu_table
from contenders import BY_NAME
from results import RunResult

BASELINE = "local-greedy"
LATENCY_PLOT = "latency.png"
THROUGHPUT_PLOT = "rules_per_second.png"


@dataclass
class Row:
    """One (workload, N, contender): the medians of its successful repeats."""

    workload: str
    rules: int
    contender: str
    runs: list[RunResult]

    @property
    def ok_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.ok]

    @property
    def status(self) -> str:
        failed = [r.status for r in self.runs if not r.ok]
        if not failed:
            return "ok"
        return f"{len(self.ok_runs)}/{len(self.runs)} ok; " + "; ".join(sorted(set(failed)))

    def median(self, get: Callable[[RunResult], float | None]) -> float | None:
        values = [v for v in map(get, self.ok_runs) if v is not None]
        return statistics.median(values) if values else None

    def latency(self, name: str, stat: str) -> float | None:
        return self.median(lambda r: r.latency.get(name, {}).get(stat))


def group(results: Sequence[RunResult]) -> list[Row]:
    rows: dict[tuple[str, int, str], Row] = {}
    for r in results:
        key = (r.workload, r.rules, r.contender)
        rows.setdefault(key, Row(r.workload, r.rules, r.contender, [])).runs.append(r)
    order = {name: i for i, name in enumerate(BY_NAME)}
    return sorted(rows.values(), key=lambda w: (w.workload, w.rules, order.get(w.contender, 99)))


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def pair(a: float | None, b: float | None, digits: int = 1) -> str:
    if a is None and b is None:
        return "-"
    return f"{fmt(a, digits)} / {fmt(b, digits)}"


def rules_per_second(row: Row) -> float | None:
    return row.median(lambda r: r.rules_per_second)


def thin_table(rows: Sequence[Row]) -> list[str]:
    baseline = {
        r.rules: rules_per_second(r)
        for r in rows
        if r.workload == "thin" and r.contender == BASELINE
    }
    lines = [
        "| N | contender | wall s | rules/s | ms/rule | vs local-greedy | submit→start "
        "p50 / p99 ms | end→told p50 / p99 ms | of which end→noticed p50 / p99 ms "
        "| bring-up s | teardown s | peak RSS Snakemake / scheduler MB | status |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row.workload != "thin":
            continue
        rate = rules_per_second(row)
        base = baseline.get(row.rules)
        ratio = rate / base if rate and base else None
        wall = row.median(lambda r: r.wall_seconds)
        per_rule = 1000 * wall / row.rules if wall is not None and row.ok_runs else None
        cells = [
            f"{row.rules:,}",
            row.contender,
            fmt(wall),
            fmt(rate),
            fmt(per_rule, 2),
            fmt(ratio, 2),
            pair(
                row.latency("submit_to_start", "p50_ms"), row.latency("submit_to_start", "p99_ms")
            ),
            pair(row.latency("end_to_told", "p50_ms"), row.latency("end_to_told", "p99_ms")),
            pair(row.latency("end_to_noticed", "p50_ms"), row.latency("end_to_noticed", "p99_ms")),
            fmt(row.median(lambda r: r.bringup_seconds), 2),
            fmt(row.median(lambda r: r.teardown_seconds), 2),
            pair(
                row.median(lambda r: r.snakemake_peak_rss_mb),
                row.median(lambda r: r.scheduler_peak_rss_mb),
                0,
            ),
            row.status,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def farm_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| tasks | contender | slots | makespan s | ideal s | makespan / ideal | wall s | status |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row.workload != "farm":
            continue
        makespan = row.median(lambda r: r.makespan_seconds)
        ideal = row.median(lambda r: r.ideal_makespan_seconds)
        slots = row.median(lambda r: r.slots)
        cells = [
            f"{row.rules:,}",
            row.contender,
            fmt(slots, 0),
            fmt(makespan, 2),
            fmt(ideal, 2),
            fmt(makespan / ideal if makespan and ideal else None, 2),
            fmt(row.median(lambda r: r.wall_seconds)),
            row.status,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def task_table(rows: Sequence[Row]) -> list[str]:
    """Time on the worker per thin rule: the job's own command (direct way) or the
    Snakemake started for it (general way)."""
    lines = [
        "| N | contender | on the worker per rule p50 / p99 ms | wall s | status |",
        "|---:|---|---:|---:|---|",
    ]
    for row in rows:
        if row.workload != "thin" or row.latency("task_duration", "p50_ms") is None:
            continue
        cells = [
            f"{row.rules:,}",
            row.contender,
            pair(row.latency("task_duration", "p50_ms"), row.latency("task_duration", "p99_ms")),
            fmt(row.median(lambda r: r.wall_seconds)),
            row.status,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cpu_lines(results: Sequence[RunResult]) -> list[str]:
    """The whole machine's CPU per job of every run that sampled it (cpu_table.py)."""
    found = [(r.run_id, r.wall_seconds, r.machine_cpu) for r in results if r.machine_cpu]
    if not found:
        return []
    return [
        "## The whole machine's CPU per job",
        "",
        *cpu_table.table(found),
        "",
    ]


def markdown(meta: dict[str, Any], results: Sequence[RunResult], plots: Sequence[str]) -> str:
    rows = group(results)
    m = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    lines = [
        "# dask-slurm benchmark results",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, {m['os']}, "
        f"kernel {m['kernel']}, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}. Packages: {packages}. Plugin revision "
        f"{m['git_revision']}. Started {meta['started']}, {meta['repeats']} repeat(s), "
        "medians shown.",
        "",
        *revision_lines(results),
        "## Thin rules",
        "",
        *thin_table(rows),
        "",
        "## Time on the worker per rule (direct and general way)",
        "",
        *task_table(rows),
        "",
        *cpu_lines(results),
        "## Load-imbalanced task farm",
        "",
        *farm_table(rows),
        "",
        "## Contenders",
        "",
    ]
    for name in dict.fromkeys(r.contender for r in results):
        c = BY_NAME.get(name)
        argv = next((r.argv for r in results if r.contender == name and r.argv), [])
        desc = c.description.format(cores=meta["cores"], slots="N") if c else name
        lines.append(f"- **{name}**: {desc}: `{command_line(argv)}`")
    lines += ["", *(f"![{p}]({p})" for p in plots)]
    return "\n".join(lines) + "\n"


def command_line(argv: Sequence[str]) -> str:
    """``[salloc ... ]snakemake <args>``: the wrapper shown as the Snakemake it runs."""
    wrapper = next((i for i, a in enumerate(argv) if a.endswith("instrumented_snakemake.py")), None)
    if wrapper is None:
        return shlex.join(argv)
    before = [a for a in argv[: wrapper - 1] if not a.startswith("--job-name=")]
    prefix = shlex.join(before) + " " if before and before[0] == "salloc" else ""
    return prefix + shlex.join(["snakemake", *argv[wrapper + 1 :]])


def revision_lines(results: Sequence[RunResult]) -> list[str]:
    found = list(dict.fromkeys(r.plugin_revision for r in results if r.plugin_revision))
    if len(found) <= 1:
        return [f"Plugin source: {found[0] if found else 'unknown'}.", ""]
    return [
        f"**Warning: the plugin's source changed during this run** ({', '.join(found)}): "
        "compare its rows with care.",
        "",
    ]


def plot(
    results: Sequence[RunResult], samples: dict[str, dict[str, list[float]]], out: Path
) -> list[str]:
    """Write the PNG plots into ``out``; returns their file names ([] without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    rows = group(results)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in BY_NAME:
        points = [
            (r.rules, rules_per_second(r))
            for r in rows
            if r.workload == "thin" and r.contender == name and rules_per_second(r)
        ]
        color = None
        if points:
            xs, ys = zip(*points, strict=True)
            (line,) = ax.plot(xs, ys, marker="o", label=name)
            color = line.get_color()
        stopped = [
            (r.rules, r.outputs_correct / r.wall_seconds)
            for row in rows
            if row.workload == "thin" and row.contender == name and not row.ok_runs
            for r in row.runs[:1]
            if r.wall_seconds and r.outputs_correct
        ]
        for x, y in stopped:  # stopped or timed out: its rate until then, an upper bound
            ax.plot([x], [y], marker="v", linestyle="none", color=color, alpha=0.6)
            color = color or ax.lines[-1].get_color()
    ax.set(xscale="log", yscale="log", xlabel="thin rules (N)", ylabel="rules per second")
    ax.set_title("Throughput on thin rules (higher is better; ▼ = stopped, rate until then)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / THROUGHPUT_PLOT, dpi=110)
    plt.close(fig)
    written.append(THROUGHPUT_PLOT)
    if _latency_plot(plt, results, samples, out):
        written.append(LATENCY_PLOT)
    return written


def _latency_plot(
    plt: Any,
    results: Sequence[RunResult],
    samples: dict[str, dict[str, list[float]]],
    out: Path,
) -> bool:
    """ECDFs of the latencies, per dask contender, at the largest N each one ran."""
    chosen: dict[str, RunResult] = {}
    for r in results:
        if r.workload == "thin" and r.ok and r.run_id in samples:
            best = chosen.get(r.contender)
            if best is None or (r.rules, -r.repeat) > (best.rules, -best.repeat):
                chosen[r.contender] = r
    if not chosen:
        return False
    titles = {
        "submit_to_start": "submission → task start",
        "end_to_noticed": "task end → executor noticed",
        "end_to_told": "task end → Snakemake told",
    }
    fig, axes = plt.subplots(1, len(titles), figsize=(14, 4.2), sharey=True)
    for ax, (name, title) in zip(axes, titles.items(), strict=True):
        for contender, r in chosen.items():
            values = sorted(max(v, 1e-3) for v in samples[r.run_id].get(name, []))
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", label=f"{contender} (N={r.rules:,})")
        ax.set(xscale="log", xlabel="milliseconds (log)", title=title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of jobs")
    axes[-1].legend(fontsize=8, loc="lower right")
    fig.suptitle("Executor-added latency per job (cumulative distribution)")
    fig.tight_layout()
    fig.savefig(out / LATENCY_PLOT, dpi=110)
    plt.close(fig)
    return True

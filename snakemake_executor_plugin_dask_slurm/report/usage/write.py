"""The report's files and the lines printed at the end of the run.

``jobs.tsv`` (one row per attempt), ``rules.tsv`` (one row per rule),
``suggested-profile.yaml`` (a Snakemake profile: ``--profile`` it, or paste its entries)
and ``report.html`` (:mod:`.page`). Each file is written whole or not at all (a temporary
file, then a rename).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .aggregate import AllocationUse, RuleStats, allocation, rule_stats
from .page import page_html
from .rows import OUTCOMES, Attempt, RunFacts, WorkerSpan
from .suggest import CORES_PERCENTILE, HEADROOM, duration
from .words import (
    JOBS_FILE,
    PAGE_FILE,
    PROFILE_FILE,
    RULES_FILE,
    cpu_time,
    group_label,
    offender_line,
)

#: How many rules the lines at the end name (the rest are in rules.tsv and the page).
OFFENDERS = 3
#: Why a suggested value is left commented out in the profile.
VARIED = (
    "its jobs asked different values (a function of the job?), which a fixed number would "
    "override: left commented out"
)


def write_report(
    directory: Path,
    attempts: Sequence[Attempt],
    workers: Sequence[WorkerSpan],
    run: RunFacts,
    page: bool = True,
) -> list[str]:
    """Write every file of the report into ``directory``; the lines to print."""
    directory.mkdir(parents=True, exist_ok=True)
    stats = rule_stats(attempts)
    alloc = allocation(attempts, workers, run)
    _atomic(directory / JOBS_FILE, jobs_tsv(attempts))
    _atomic(directory / RULES_FILE, rules_tsv(stats))
    _atomic(directory / PROFILE_FILE, profile_yaml(stats, run, len(attempts)))
    problem = None
    if page:
        try:
            _atomic(directory / PAGE_FILE, page_html(attempts, workers, run, stats, alloc))
        except Exception as e:  # the tables and the profile are written anyway
            problem = f"report.html could not be written ({type(e).__name__}: {e})"
    lines = summary_lines(attempts, stats, alloc, directory, page and problem is None)
    return [*lines, problem] if problem else lines


#: In the reports' directory: the newest run's report.
LATEST = "latest"


def run_report_dir(root: Path, started: float, token: str) -> Path:
    """A run's own report directory: ``<root>/<date>-<time>-<run id>``."""
    return root / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}-{token}"


def point_latest(root: Path, directory: Path) -> None:
    """Make ``<root>/latest`` point at ``directory`` (replaced in one step)."""
    tmp = root / f".{LATEST}.tmp{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(directory.name, tmp)
    os.replace(tmp, root / LATEST)


def root_problem(root: Path) -> str | None:
    """Why the reports cannot be written under ``root`` (created if missing), in a
    sentence for the user; None if they can. Checked at the start of a run, so an unusable
    directory stops it before anything starts instead of losing its report at the end."""
    probe = root / f".write-test-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        return (
            f"Cannot write the usage report under {root}: {e.strerror or e}{where}. The "
            "report is written there at the end of the run, so this run would lose it. "
            "Choose a directory you can write with --dask-slurm-usage-report-dir, or turn "
            "the report off with --dask-slurm-no-usage-report."
        )
    return None


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# -- tables -----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if value == value else ""
    text = str(value)
    return text.replace("\t", " ").replace("\n", " ") if ("\t" in text or "\n" in text) else text


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["\t".join(header)]
    lines += ["\t".join(_cell(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


JOBS_COLUMNS = (
    "rule", "jobid", "attempt", "rerun", "wildcards", "way", "outcome", "detail",
    "threads", "mem_mb", "runtime_min", "host", "worker", "slurm_job",
    "handed_over", "started", "finished", "wait_s", "wall_s", "cpu_s", "cores",
    "cpu_efficiency", "max_rss_mb", "rss_at_most_mb", "key",
)  # fmt: skip


def _g(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _t(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def jobs_tsv(attempts: Iterable[Attempt]) -> str:
    """One row per attempt; times in epoch seconds (``started`` on the node's clock).

    Formatted inline, one f-string per row: it is the report's largest table."""
    lines = ["\t".join(JOBS_COLUMNS)]
    for a in attempts:
        wall, cpu = a.wall, a.cpu
        cores = cpu / wall if cpu is not None and wall else None
        efficiency = cores / a.threads if cores is not None and a.threads else None
        lines.append(
            f"{a.rule}\t{a.jobid}\t{a.attempt}\t{a.rerun}\t{_cell(a.wildcards)}\t{a.way}\t"
            f"{a.outcome}\t{_cell(a.detail)}\t{a.threads}\t{_g(a.mem_mb)}\t{_g(a.runtime_min)}\t"
            f"{a.host}\t{a.worker}\t{a.slurm_job}\t{a.handed_over:.6f}\t{_t(a.started)}\t"
            f"{_t(a.finished)}\t{_t(a.wait)}\t{_t(wall)}\t{_t(cpu)}\t{_g(cores)}\t"
            f"{_g(efficiency)}\t{_g(a.max_rss_mb)}\t{_g(a.rss_at_most_mb)}\t{a.key}"
        )
    return "\n".join(lines) + "\n"


RULES_COLUMNS = (
    "rule", "group", "ways", "attempts", "done", "failed", "lost", "stopped", "not_started",
    "threads", "mem_mb", "runtime_min", "jobs_without_mem_mb",
    "wall_p50_s", "wall_p95_s", "wall_max_s", "wait_p50_s",
    "cpu_s", "reserved_cpu_s", "unused_cpu_s", "cores_mean", "cores_p90", "cpu_efficiency",
    "rss_p50_mb", "rss_max_mb", "rss_at_most_mb", "mem_use", "varies",
    "suggested_threads", "suggested_mem_mb", "suggested_runtime", "changed", "headroom",
)  # fmt: skip


def rules_tsv(stats: Iterable[RuleStats]) -> str:
    """One row per rule, the most CPU reserved and unused first."""

    def row(s: RuleStats) -> tuple[Any, ...]:
        g = s.suggestion
        return (
            s.rule, s.group, s.ways, s.attempts, s.done, s.failed, s.lost, s.stopped,
            s.not_started, s.threads, s.mem_mb, s.runtime_min, s.jobs_without_mem,
            s.wall_p50, s.wall_p95, s.wall_max, s.wait_p50,
            s.cpu_s, s.reserved_s, s.unused_s, s.cores_mean, s.cores_p90, s.cpu_efficiency,
            s.rss_p50_mb, s.rss_max_mb, s.rss_at_most_mb, s.mem_use, ",".join(s.varies),
            g.threads, g.mem_mb, g.runtime, ",".join(g.changed),
            f"memory and runtime {HEADROOM}x the largest use; threads from the cores used "
            f"at p{CORES_PERCENTILE}",
        )  # fmt: skip

    return _table(RULES_COLUMNS, map(row, stats))


# -- the profile ------------------------------------------------------------------------


def profile_yaml(stats: Sequence[RuleStats], run: RunFacts, attempts: int) -> str:
    """The suggestions as a Snakemake profile: ``set-threads:`` and ``set-resources:``
    per rule, each with a comment giving the evidence. A value Snakemake would take from
    a per-job function (the rule's jobs asked differently) is left commented out: a
    fixed number would override the function."""
    threads: list[str] = []
    resources: list[str] = []
    for s in sorted((s for s in stats if not s.group), key=lambda s: s.rule):
        basis = _basis(s)
        threads += _threads_entry(s, basis)
        resources += _resources_entry(s, basis)
    # A key with only comments under it is empty (None), which Snakemake's profile
    # loader skips.
    head = _profile_head(stats, run, attempts)
    body = [*head, "set-threads:", *threads, "set-resources:", *resources]
    return "\n".join(body) + "\n"


def _profile_head(stats: Sequence[RuleStats], run: RunFacts, attempts: int) -> list[str]:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started))
    head = [
        f"# Suggested by the dask-slurm usage report of the run of {when} ({attempts} job",
        "# attempts), from what each rule's jobs used, measured exactly on the workers.",
        "# Pass it with --profile <this file> (alongside your own profiles), or paste what",
        f"# you want. Memory and runtime: {HEADROOM}x the largest use, rounded up; threads:",
        f"# the cores its jobs kept busy at p{CORES_PERCENTILE}. Memory is in MB (10^6 bytes),",
        "# the unit of Snakemake's mem_mb (the kernel's peak RSS in KiB converted). See the",
        '# plugin\'s docs, docs/further.md, "The usage report".',
    ]
    groups = [group_label(s) for s in stats if s.group]
    if groups:
        head += [
            f"# Not here: {', '.join(groups)}. A group job is measured as one task (its",
            "# members' CPU summed, its largest process's peak), so no figure is one member",
            "# rule's; Snakemake sizes a group job from its members' rules: see rules.tsv",
            "# for what the group as a whole used and change those rules' values yourself.",
        ]
    return head


def _basis(s: RuleStats) -> str:
    """What a rule's suggestions rest on, in words."""
    basis = f"{s.done} succeeded of {s.attempts} attempt(s)"
    if s.done == 1:
        basis += ", from ONE job only"
    if s.varies:
        basis += f"; its jobs vary widely in {' and '.join(s.varies)}"
    return basis


def _threads_entry(s: RuleStats, basis: str) -> list[str]:
    """A rule's lines under ``set-threads:`` (none without a suggestion)."""
    g = s.suggestion
    if g.threads is None:
        return []
    off = "# " if "threads" in s.asked_differently else ""
    why = f"; {VARIED}" if off else ""
    return [f"  # {s.rule}: {basis}; {g.notes[0]}{why}", f"  {off}{s.rule}: {g.threads}"]


def _resources_entry(s: RuleStats, basis: str) -> list[str]:
    """A rule's lines under ``set-resources:``."""
    g = s.suggestion
    entries = [
        (name, value, note)
        for name, value, note in (
            ("mem_mb", g.mem_mb, g.notes[1]),
            ("runtime", g.runtime, g.notes[2]),
        )
        if value is not None
    ]
    # A rule whose every resource would be commented out gets no (empty) mapping.
    if any(name not in s.asked_differently for name, _, _ in entries):
        lines = [f"  # {s.rule}: {basis}", f"  {s.rule}:"]
        for name, value, note in entries:
            varied = name in s.asked_differently
            why = f"; {VARIED}" if varied else ""
            lines += [f"    # {note}{why}", f"    {'# ' if varied else ''}{name}: {value}"]
        return lines
    if entries:
        return [
            f"  # {s.rule}: {basis}; {VARIED}:",
            *(f"  #   {name}: {value}  ({note})" for name, value, note in entries),
        ]
    if g.threads is None:
        return [f"  # {s.rule}: no job of it succeeded or was measured: nothing to suggest"]
    return []


# -- the lines at the end --------------------------------------------------------------


def _counts(attempts: Sequence[Attempt]) -> str:
    found = {o: sum(1 for a in attempts if a.outcome == o) for o in OUTCOMES}
    parts = [f"{n} {o}" for o, n in found.items() if n]
    return ", ".join(parts) or "none"


def summary_lines(
    attempts: Sequence[Attempt],
    stats: Sequence[RuleStats],
    alloc: AllocationUse,
    directory: Path,
    page: bool,
) -> list[str]:
    """A few lines: the farm's efficiency, the worst offenders, where the report is."""
    o = alloc.overall
    lines = [f"usage: {len(attempts)} job attempt(s): {_counts(attempts)}"]
    if o.granted_s > 0:
        lines[0] += (
            f"; the farm's CPUs were {o.efficiency or 0:.0%} used ({cpu_time(o.used_s)} of "
            f"{cpu_time(o.granted_s)} granted; jobs reserved {o.occupancy or 0:.0%} of them "
            f"and used {o.used_s / o.reserved_s if o.reserved_s else 0:.0%} of what they reserved)"
        )
    if alloc.tail_s is not None and alloc.tail_idle_s is not None:
        lines[0] += f"; the last jobs kept it waiting {duration(alloc.tail_s)}"
    worst = [line for s in stats if s.unused_s > 0 and (line := offender_line(s))]
    over = [
        line
        for s in stats
        if (s.mem_use or 0) > 1 and (line := offender_line(s)) and line not in worst[:OFFENDERS]
    ]
    lines += [f"usage: {line}" for line in [*worst[:OFFENDERS], *over[:OFFENDERS]]]
    where = directory / PAGE_FILE if page else directory / RULES_FILE
    lines.append(
        f"usage report: {where}; what each rule should ask for: --profile "
        f"{directory / PROFILE_FILE}"
    )
    return lines

"""The report's words that its files and its page share: the files' names, CPU time in
words, and the line that says what a rule should ask for next time. Imported by
:mod:`.write` (the tables, the profile, the lines at the end) and :mod:`.page_data` (the
page's header)."""

from __future__ import annotations

from .aggregate import RuleStats
from .suggest import duration

JOBS_FILE = "jobs.tsv"
RULES_FILE = "rules.tsv"
PROFILE_FILE = "suggested-profile.yaml"
PAGE_FILE = "report.html"


def cpu_time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} CPU-s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} CPU-min"
    return f"{seconds / 3600:.1f} CPU-h"


#: Why a group job is not in the suggested profile (its line at the end, the profile).
GROUP_WHY = (
    "measured as one task (its members' CPU summed, its largest process's peak), so no "
    "figure is one member's: Snakemake sizes a group job from its members' rules, change "
    "theirs; not in the suggested profile"
)


def offender_line(s: RuleStats) -> str | None:
    """``rule align: asks 8 threads, uses 1.3 on average -> threads: 2; ...``, or None
    when the rule's suggestion keeps what it asked. A group job's line gives what the
    group as a whole would need, and why no rule of it gets a suggestion
    (:data:`GROUP_WHY`)."""
    g = s.suggestion

    def to(name: str, value: int | None) -> str:
        return f"-> {value} for the whole group" if s.group else f"-> {name}: {value}"

    parts = []
    if "threads" in g.changed and s.cores_mean is not None:
        what = f"{s.threads} thread{'s' if s.threads != 1 else ''}"
        parts.append(f"asks {what}, uses {s.cores_mean:.1f} on average {to('threads', g.threads)}")
    peak = s.peak_mb
    if "mem_mb" in g.changed and peak is not None:
        asked = f"asks mem_mb {s.mem_mb:,.0f}" if s.mem_mb is not None else "asks no mem_mb"
        at_most = "at most " if peak != s.rss_max_mb else ""
        parts.append(f"{asked}, peak {at_most}{peak:,.0f} MB {to('mem_mb', g.mem_mb)}")
    if "runtime" in g.changed and s.runtime_min is not None and s.wall_max is not None:
        longest = duration(s.wall_max)
        parts.append(
            f"asks runtime {s.runtime_min:g} min, longest {longest} {to('runtime', g.runtime)}"
        )
    if not parts:
        return None
    if s.group:
        return f"{group_label(s)}: {'; '.join(parts)}; {GROUP_WHY}"
    return f"rule {s.rule}: {'; '.join(parts)}"


def group_label(s: RuleStats) -> str:
    """``group job g (rules a, b)``."""
    name = s.rule.removeprefix("group ")
    rules = f" (rule{'s' if len(s.members) != 1 else ''} {', '.join(s.members)})"
    return f"group job {name}{rules if s.members else ''}"

"""How long the allocation has left, from what SLURM says (pure).

``SLURM_JOB_END_TIME`` (Slurm 23.02+, in batch scripts and srun steps, not in an salloc
shell) is read first: it costs no call to SLURM. Otherwise ``scontrol show job -o`` gives
``TimeLimit`` and ``RunTime`` as ``[D-]HH:MM:SS``; their difference is the time left by the
controller's clock (as HyperQueue does), whatever time zone ``EndTime`` is printed in. The
variable is not updated when the limit changes (``scontrol update TimeLimit=...``), so the
plugin asks scontrol again every few minutes while it runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

#: What SLURM prints for a job without a time limit.
UNLIMITED = frozenset({"UNLIMITED", "INFINITE", "NOT_SET", "N/A", "Partition_Limit"})


def parse_duration(text: str) -> float | None:
    """Seconds in a SLURM duration, None for no limit or what cannot be read.

    With days, ``D-HH[:MM[:SS]]``; without, ``MM``, ``MM:SS`` or ``HH:MM:SS`` (how
    ``sbatch --time`` reads them, and the forms ``scontrol``/``squeue`` print).
    """
    text = text.strip()
    if not text or text in UNLIMITED or text.upper() in UNLIMITED:
        return None
    days, dash, rest = text.rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or (dash and not days.isdigit()) or len(parts) > 3:
        return None
    numbers = [int(p) for p in parts]
    if dash:
        hours, minutes, seconds = [*numbers, 0, 0][:3]
        return float(((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds)
    if len(numbers) == 3:
        hours, minutes, seconds = numbers
    else:
        hours, (minutes, seconds) = 0, [*numbers, 0][:2]
    return float((hours * 60 + minutes) * 60 + seconds)


def time_left(scontrol_job: str) -> float | None:
    """Seconds the job has left (``TimeLimit - RunTime``), at least 0; None for a job
    without a time limit, or when ``scontrol show job -o`` did not say."""
    fields = dict(re.findall(r"(?:^|\s)(TimeLimit|RunTime)=(\S*)", scontrol_job))
    limit = parse_duration(fields.get("TimeLimit", ""))
    ran = parse_duration(fields.get("RunTime", ""))
    if limit is None or ran is None:
        return None
    return max(0.0, limit - ran)


#: Slurm 23.02+ sets it in batch scripts and srun steps (not in an salloc shell).
END_TIME_VARIABLE = "SLURM_JOB_END_TIME"


def allocation_end(
    env: Mapping[str, str], seconds_left: float | None, now: float
) -> tuple[float, str] | None:
    """When the allocation ends (seconds since the epoch) and where that came from:
    ``SLURM_JOB_END_TIME`` when SLURM set it, else ``now + seconds_left`` (scontrol's
    ``TimeLimit - RunTime``); None when neither says (no time limit, or not in SLURM)."""
    value = env.get(END_TIME_VARIABLE, "")
    if value.isdigit() and int(value) > 0:
        return float(value), END_TIME_VARIABLE
    if seconds_left is not None:
        return now + seconds_left, "scontrol show job (TimeLimit - RunTime)"
    return None


def time_option(sbatch_args: Sequence[str]) -> str | None:
    """The ``--time`` among sbatch options (``--time=T``, ``--time T``, ``-t T``, ``-tT``;
    the last one wins, as with sbatch), or None."""
    found = None
    args = list(sbatch_args)
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("--time="):
            found = arg.removeprefix("--time=")
        elif arg in ("--time", "-t"):
            found = following
        elif arg.startswith("-t") and not arg.startswith("--"):
            found = arg[2:]
    return found


def partition_time_limit(sinfo: str, partition: str | None) -> float | None:
    """A job's time limit in ``partition`` (None: SLURM's default partition) when it asks
    for none, from ``sinfo --format=%P|%l|%L`` lines: the partition's default time, else
    its maximum; None when it has none, or the partition is not listed."""
    for line in sinfo.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, maximum, default = parts
        if (partition is None and name.endswith("*")) or name.rstrip("*") == partition:
            return parse_duration(default) or parse_duration(maximum)
    return None

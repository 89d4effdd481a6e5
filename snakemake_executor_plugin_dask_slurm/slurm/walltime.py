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
from collections.abc import Mapping

#: What SLURM prints for a job without a time limit.
UNLIMITED = frozenset({"UNLIMITED", "INFINITE", "NOT_SET", "N/A", "Partition_Limit"})


def parse_duration(text: str) -> float | None:
    """Seconds in a SLURM duration, None for no limit or what cannot be read.

    With days, ``D-HH[:MM[:SS]]``; without, ``MM``, ``MM:SS`` or ``HH:MM:SS`` (how
    ``sbatch --time`` reads them, and the forms ``scontrol``/``squeue`` print).
    """
    text = text.strip()
    if not text or text in UNLIMITED:
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

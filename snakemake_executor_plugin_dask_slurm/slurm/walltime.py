"""How long the allocation has left, from what SLURM prints (pure).

``scontrol show job -o`` gives ``TimeLimit`` and ``RunTime`` as ``[D-]HH:MM:SS``; their
difference is the time left, measured by the controller's clock (as HyperQueue does), so it
does not depend on the time zone ``EndTime`` is printed in or on this node's clock.
``SLURM_JOB_END_TIME`` (Slurm 23.02+, batch scripts and srun steps, not salloc) is not
used: it is not updated when the limit changes, and Slurm 22.05 does not set it.
"""

from __future__ import annotations

import re

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

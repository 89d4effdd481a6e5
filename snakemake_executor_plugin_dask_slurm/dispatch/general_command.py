"""The general way's command: Snakemake's own job command for a job (``format_job_exec``),
read as a job command (:func:`parsed`) and turned into what the worker runs
(:func:`general_argv`); a group job's through :mod:`.group_runner`."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from typing import Any

from ..warm.command import JobCommand, Unsplittable, parse_job_command
from .group_runner import MODULE as GROUP_RUNNER

#: The shell for a general-way job command that is not a plain ``[export ... &&] python
#: -m ...`` (never seen from Snakemake 9; every other one runs without a shell). Bash, as
#: Snakemake's own ``shell()`` prefers: a POSIX ``sh`` such as dash drops exported shell
#: functions (``BASH_FUNC_module%%``, an HPC site's ``module``) from the job's environment.
GENERAL_SHELL = shutil.which("bash") or "/bin/sh"


def parsed(command: str) -> JobCommand | Unsplittable:
    """``command`` read as a job command (:func:`..warm.command.parse_job_command`), or
    what does not fit; read once per job, for both :func:`general_argv` and
    the way (:func:`.way.decide`)."""
    try:
        return parse_job_command(command)
    except Unsplittable as e:
        return e


def general_argv(
    command: str, env: tuple[tuple[str, str], ...], found: JobCommand | Unsplittable | None = None
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The argument list and environment that run a general-way job command: its
    interpreter, exec'd with the command's exports added to ``env``, as ``sh -c`` would
    (and without a shell between the worker and the job, which could change the job's
    environment); any other shape through :data:`GENERAL_SHELL`. ``found``: the command
    already :func:`parsed`."""
    found = parsed(command) if found is None else found
    if isinstance(found, Unsplittable) or found.cd is not None:
        return (GENERAL_SHELL, "-c", command), env
    return (found.python, "-m", found.module, *found.argv), env + found.exports


def with_group_runner(command: str, python: str) -> str:
    """Snakemake's job command for a group, run through :mod:`.group_runner` (a race in
    Snakemake's pipe groups can hang the group's own Snakemake for ever). Only when the
    command runs ``python``, this interpreter, which has the plugin; else as it is."""
    head, found, tail = command.partition(f"{python} -m snakemake ")
    return f"{head}{python} -m {GROUP_RUNNER} {tail}" if found else command


async def prepare_all(jobs: Sequence[Any]) -> list[BaseException | None]:
    """``job.prepare()`` for every job, in one event-loop run; each job's error or None."""
    results = await asyncio.gather(*(job.prepare() for job in jobs), return_exceptions=True)
    return [r if isinstance(r, BaseException) else None for r in results]

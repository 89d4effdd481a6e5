"""Snakemake's local executor (snakemake/executors/local.py): a group's ``run:`` members warm.

A group job's own Snakemake runs its ``run:`` and ``shadow:`` members in a new process each
(``Executor.spawn_job``: ``python -m snakemake ... --mode subprocess`` of
``format_job_exec``). In a group's warm process ``spawn_job`` is replaced (warm/member.py)
so that the same command goes to the zygote; what that relies on is :data:`SPAWN_JOB`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .guard import Touch, mark, present


def _names() -> str:
    from snakemake.exceptions import SpawnedJobError
    from snakemake.executors import local

    return present(
        [
            ("Executor.spawn_job", callable(getattr(local.Executor, "spawn_job", None))),
            (
                "Executor.format_job_exec",
                callable(getattr(local.Executor, "format_job_exec", None)),
            ),
            ("SpawnedJobError", isinstance(SpawnedJobError, type)),
        ]
    )


def wrap_spawn_job(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``Executor.spawn_job`` by ``make(Snakemake's own)``. False, and nothing
    changed, if the local executor is not the one this was written for."""
    if not SPAWN_JOB.matches():
        return False
    from snakemake.executors import local

    original = local.Executor.spawn_job
    local.Executor.spawn_job = mark(make(original), original)
    return True


def log_debug(message: str) -> None:
    """``message`` on Snakemake's logger at debug level, as ``spawn_job`` writes it."""
    from snakemake.logging import logger

    logger.debug(message)


def spawned_job_error() -> Exception:
    """The error Snakemake's ``spawn_job`` raises for a member that failed
    (``SpawnedJobError``)."""
    from snakemake.exceptions import SpawnedJobError

    return SpawnedJobError()


SPAWN_JOB = Touch(
    name="warm group members",
    kind="hook",
    what="Executor.spawn_job and format_job_exec (snakemake/executors/local.py)",
    written_for="9.27.1",
    without="a group's run: members start a fresh Snakemake each, as on the cold way",
    found=_names,
    fingerprint="Executor.spawn_job,Executor.format_job_exec,SpawnedJobError",
)
TOUCHES = (SPAWN_JOB,)

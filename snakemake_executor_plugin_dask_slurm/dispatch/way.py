"""The way of one job, decided in Snakemake's process (pure): direct, warm or cold.

* **direct**: a plain ``shell:`` rule's command, run on the worker as Snakemake's
  ``shell()`` would (:mod:`.direct_way` says which facts rule it out);
* **warm**: Snakemake's job command, in a process forked from one that has the workflow
  parsed (:mod:`..warm`);
* **cold**: Snakemake's job command as a fresh Snakemake, with the named reason
  (:class:`..worker.wire.Cold`) that the end of the run counts.

:func:`decide` is the one decision; the builder (:mod:`.job_commands`) reads the facts off
the job, and :meth:`~.job_commands.JobCommandBuilder.prime_request` asks the same question.
The warm process and the worker may still send a warm job cold for what only they know
(:class:`..worker.wire.Why`'s other sections).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..warm.command import JobCommand, Unsplittable
from ..worker.wire import Cold, Way, Why
from .direct_way import NotDirect
from .group_runner import MODULE as GROUP_RUNNER

#: The modules whose job command the warm path runs: Snakemake, and a group's runner.
WARM_MODULES = frozenset({"snakemake", GROUP_RUNNER})


@dataclass(frozen=True, slots=True)
class Facts:
    """What Snakemake's process knows of one job when it chooses its way.

    ``command`` is needed only when :func:`not_direct` is not empty (the builder formats
    Snakemake's job command only for a job that cannot go the direct way); ``deployment``
    only with ``warm``."""

    #: ``--dask-slurm-no-direct-shell`` not given.
    direct_shell: bool
    #: ``--dask-slurm-no-warm`` not given.
    warm: bool
    #: A group job (or a job of a group that Snakemake's scheduler forms later).
    group: bool = False
    #: Why its rule's jobs cannot go the direct way (:func:`.direct_way.blockers` of its
    #: rule's facts, or :attr:`NotDirect.NOT_LITERAL`): one value per rule.
    rule: tuple[NotDirect, ...] = ()
    #: Why this job cannot (:func:`.direct_way.blockers` of its job facts); () when
    #: not read, as its rule rules the direct way out already.
    job: tuple[NotDirect, ...] = ()
    #: Why its software deployment (conda, a container, ...) goes the cold way, or None.
    deployment: str | None = None
    #: Snakemake's job command, split (:func:`..warm.command.parse_job_command`), or what
    #: does not fit; None when not formatted.
    command: JobCommand | Unsplittable | None = None


@dataclass(frozen=True, slots=True)
class Direct:
    """The job's command runs on the worker as Snakemake's ``shell()`` would run it."""


#: The one :class:`Direct` value.
DIRECT = Direct()


@dataclass(frozen=True, slots=True)
class Warm:
    """Snakemake's job command, on the warm path: ``command`` split, and why the job did
    not go the direct way."""

    command: JobCommand
    why_not_direct: tuple[NotDirect, ...]


def not_direct(facts: Facts) -> tuple[NotDirect, ...]:
    """Why the job cannot go the direct way (empty: it goes that way)."""
    if not facts.direct_shell:
        return (NotDirect.TURNED_OFF,)
    if facts.group:
        return (NotDirect.GROUP,)
    return facts.rule + facts.job if facts.job else facts.rule


def command_cold(found: JobCommand | Unsplittable) -> Cold | None:
    """Why a general-way job command cannot run warm, or None: it needs a shell, or runs
    something other than Snakemake."""
    if isinstance(found, Unsplittable):
        return Cold(Why.NEEDS_SHELL, str(found))
    if found.module not in WARM_MODULES:
        return Cold(Why.NOT_SNAKEMAKE, found.module)
    return None


def decide(facts: Facts) -> Direct | Warm | Cold:
    """The way of the job these facts describe (see the module's docstring)."""
    why_not_direct = not_direct(facts)
    if not why_not_direct:
        return DIRECT
    if not facts.warm:
        return Cold(Why.WARM_OFF)
    if facts.deployment is not None:
        return Cold(Why.DEPLOYMENT, facts.deployment)
    found = facts.command
    if found is None:
        raise ValueError("a job that cannot go the direct way needs its job command read")
    cold = command_cold(found)
    if cold is not None:
        return cold
    assert isinstance(found, JobCommand)
    return Warm(found, why_not_direct)


class DirectDraft(NamedTuple):
    """What the direct way runs for a job (read with its job facts). A named tuple: one
    per direct job, and a tuple is built several times faster than a frozen dataclass."""

    argv: tuple[str, ...]
    tmpdir: str | None
    modules: Any


class Chosen(NamedTuple):
    """A job's way (:func:`decide`), and what that way runs: the direct way's draft, or
    Snakemake's job command (and its split). A named tuple, as :class:`DirectDraft`."""

    way: Direct | Warm | Cold
    draft: DirectDraft | None = None
    command: str = ""
    found: JobCommand | Unsplittable | None = None


def way_name(way: Direct | Warm | Cold) -> Way:
    """``"direct"``, ``"warm"`` or ``"cold"``: the way as the usage report names it."""
    return "direct" if isinstance(way, Direct) else "warm" if isinstance(way, Warm) else "cold"

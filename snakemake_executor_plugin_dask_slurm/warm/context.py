"""What the zygote found once at start-up, handed down to every process forked from it.

The zygote (:mod:`.zygote`) makes one :class:`ZygoteContext` before it says it is ready
and passes it, as an argument, to what it forks: a primed server (:mod:`.primed`), each
job's process (:mod:`.child`), a group's members (:mod:`.member`), a warm script's process
(:mod:`.script_run`). A forked process has its own copy of it, like the rest of the
zygote's memory; nothing sets it from elsewhere.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .thread_pools import Pools


@dataclass(frozen=True)
class ScriptSetup:
    """What :func:`.script.install` found in the zygote for warm jobs' Python scripts
    (all empty when it installed nothing)."""

    #: The bash ``shell()`` uses by default (None: scripts go through the shell).
    default_bash: str | None = None
    #: What ``import snakemake`` appends to ``sys.path`` (its pip deployments), which a
    #: fresh script's preamble does when it imports Snakemake.
    appended_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class ZygoteContext:
    """The zygote's start, as every process forked from it needs it."""

    #: The zygote's listening address in the abstract namespace: known to the servers and
    #: jobs forked from it only (a group's members and warm scripts connect to it).
    address: str
    #: The signal dispositions the zygote started with: a fresh process's.
    dispositions: Mapping[int, Any]
    #: ``sys.path`` as the zygote's interpreter started: what a script's ``python FILE``
    #: has after its own directory.
    initial_path: tuple[str, ...]
    #: The zygote's environment (without the marker's slot): what a job's adds to.
    base_env: Mapping[str, str]
    scripts: ScriptSetup = ScriptSetup()
    #: numpy's OpenBLAS pools, loaded with one thread (:mod:`.thread_pools`): each forked
    #: process sizes them for its own environment.
    pools: Pools = field(default_factory=Pools)


def listening_address() -> str:
    """A new name for the zygote's listening socket in the abstract namespace."""
    return f"\0dask-slurm-warm-{os.getpid()}-{secrets.token_hex(8)}"

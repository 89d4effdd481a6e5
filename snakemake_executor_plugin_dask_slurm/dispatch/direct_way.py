"""Decide whether a job's shell command may run directly on a worker.

Running a plain ``shell:`` rule's formatted command directly (after the preparation
Snakemake's job command would do) costs milliseconds; the general way starts a whole
Snakemake per job (~2 s of CPU). The direct way is only taken when it is provably the
same as what Snakemake's own ``shell()`` would run; every feature that wraps, times or
relocates the command sends the job the general way instead.

Pure: the facts are read off the job elsewhere (:mod:`.job_commands`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

#: Commands longer than this are written to a script by Snakemake's ``shell()``; we leave
#: those to the general way.
MAX_DIRECT_COMMAND = 65536


@dataclass(frozen=True, slots=True)
class RuleFacts:
    """What makes a rule's jobs ineligible, whatever their wildcards (cached per rule)."""

    not_shell: bool = False  # run:, script:, notebook:, wrapper:, cwl:, or no command
    shadow: bool = False
    conda: bool = False
    container: bool = False
    software_env: bool = False  # another software environment (Snakemake 10's plugins)
    benchmark: bool = False
    cache: bool = False
    pipe_or_service: bool = False
    debug_or_edit_notebook: bool = False


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What makes one job ineligible."""

    group: bool = False
    shell_exec_resource: bool = False  # resources.shell_exec picks another shell
    tmpdir_placeholder: bool = False  # uses {resources.tmpdir}, unknown on this side
    tmpdir_expression: bool = False  # a tmpdir only the job's own side can evaluate
    unformattable: bool = False  # the command cannot be formatted on this side
    too_long: bool = False
    storage_files: bool = False  # remote storage inputs/outputs need Snakemake's copy


class NotDirect(StrEnum):
    """A named reason a job does not go the direct way (its value: what a user reads, in
    the detail log). The members of :class:`RuleFacts` and :class:`JobFacts`, by field
    name, then the ones the builder knows without facts."""

    NOT_SHELL = "not a shell: rule"
    SHADOW = "shadow:"
    CONDA = "conda:"
    CONTAINER = "container:"
    SOFTWARE_ENV = "a software environment Snakemake deploys"
    BENCHMARK = "benchmark:"
    CACHE = "cache:"
    PIPE_OR_SERVICE = "pipe()/service() output"
    DEBUG_OR_EDIT_NOTEBOOK = "--debug or --edit-notebook"
    GROUP = "group job"
    SHELL_EXEC_RESOURCE = "resources.shell_exec"
    TMPDIR_PLACEHOLDER = "uses {resources.tmpdir}"
    TMPDIR_EXPRESSION = "tmpdir resource evaluated where the job runs"
    UNFORMATTABLE = "command cannot be formatted before the job runs"
    TOO_LONG = f"command longer than {MAX_DIRECT_COMMAND} characters"
    STORAGE_FILES = "storage-plugin files"
    #: ``--dask-slurm-no-direct-shell``.
    TURNED_OFF = "--dask-slurm-no-direct-shell"
    #: The ``shell:`` is not a literal command Snakemake's ``shell()`` formats
    #: (:func:`.direct_command.literal_shell_rule` says how, in the detail log).
    NOT_LITERAL = "shell: is not a literal command of Snakemake's shell()"


_REASONS = {name: NotDirect[name.upper()] for name in {*RuleFacts.__slots__, *JobFacts.__slots__}}


def blockers(facts: RuleFacts | JobFacts) -> tuple[NotDirect, ...]:
    """Why these facts rule out the direct way (empty: they don't)."""
    return tuple(_REASONS[f.name] for f in fields(facts) if getattr(facts, f.name))

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


_REASONS = {
    "not_shell": "not a shell: rule",
    "shadow": "shadow:",
    "conda": "conda:",
    "container": "container:",
    "software_env": "a software environment Snakemake deploys",
    "benchmark": "benchmark:",
    "cache": "cache:",
    "pipe_or_service": "pipe()/service() output",
    "debug_or_edit_notebook": "--debug or --edit-notebook",
    "group": "group job",
    "shell_exec_resource": "resources.shell_exec",
    "tmpdir_placeholder": "uses {resources.tmpdir}",
    "tmpdir_expression": "tmpdir resource evaluated where the job runs",
    "unformattable": "command cannot be formatted before the job runs",
    "too_long": f"command longer than {MAX_DIRECT_COMMAND} characters",
    "storage_files": "storage-plugin files",
}


def blockers(facts: RuleFacts | JobFacts) -> tuple[str, ...]:
    """Why these facts rule out the direct way (empty: they don't)."""
    return tuple(_REASONS[f.name] for f in fields(facts) if getattr(facts, f.name))

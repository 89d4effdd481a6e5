"""Snakemake's own job command, with the workflow parsed once (Snakemake 9.x internals).

A job's process runs ``snakemake.cli.main(argv)``, Snakemake's entry point, with the
arguments of the job command (``python -m snakemake <argv>``), so that everything after
the parse — the one-job DAG, ``job.prepare()``, the job, its post-processing, the metadata,
exit code and error messages with Snakefile line numbers — is Snakemake's own code. Two
of its steps come from the primed server it was forked from:

- ``cli.get_argument_parser()`` returns a parser the server built and never used (its
  default values are fresh, as in a new process);
- ``WorkflowApi._workflow`` (the property that parses the Snakefile) returns the workflow
  the server parsed, with what differs per process replaced: the logging of this run of
  ``main()``, the storage settings (``--unneeded-temp-files`` is per job), a temporary
  directory, asyncio runners and a thread pool of its own, and the start time.

The server parses the same way: it runs ``main(argv)`` of its first job until the
workflow is parsed (:func:`prime`), then stops it. Which arguments may differ between
jobs that share a parse is :data:`PER_JOB_FLAGS`: Snakemake reads them only after the
parse (DAG, execution and group settings), except ``--unneeded-temp-files``.

:func:`check_internals` pins everything used here (``snakemake_internals.cli.WARM_PARSE``);
tests/component/test_snakemake_internals.py fails on a Snakemake release that changes it.
What would make this unnecessary upstream: an API call that runs one job of an already
parsed workflow (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import re
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from ..snakemake_internals import cli as internal_cli

#: Arguments of Snakemake's job command that differ between jobs of one run
#: (snakemake_interface_executor_plugins' ``RealExecutor.get_job_args``, and
#: ``--wait-for-files``): they are applied after the workflow is parsed.
PER_JOB_FLAGS = (
    "--target-jobs",
    "--allowed-rules",
    "--local-groupid",
    "--attempt",
    "--force-use-threads",
    "--unneeded-temp-files",
    "--wait-for-files",
    "--wait-for-files-file",
)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class Unsupported(Exception):
    """The warm path cannot run this (the reason is the message)."""


class _Primed(BaseException):
    """Stops the server's run of ``main()`` once the workflow is parsed (a BaseException:
    ``main()`` catches every Exception)."""

    def __init__(self, workflow: Any):
        super().__init__("primed")
        self.workflow = workflow


def general_argv(argv: Sequence[str], nargs: dict[str, Any]) -> tuple[str, ...]:
    """``argv`` without the per-job arguments (:data:`PER_JOB_FLAGS` and their values,
    consumed as argparse would: ``nargs`` per flag): the key of one parse."""
    kept: list[str] = []
    skip: Any = 0
    for arg in argv:
        if skip:
            if skip in ("+", "*") and not (arg.startswith("-") and not _NEGATIVE_NUMBER.match(arg)):
                continue
            if isinstance(skip, int) and skip > 0:
                skip -= 1
                continue
            skip = 0
        flag = arg.split("=", 1)[0]
        if flag in PER_JOB_FLAGS:
            skip = 0 if "=" in arg else nargs.get(flag)
            if skip is None or skip == "?":
                skip = 1
            continue
        kept.append(arg)
    return tuple(kept)


class _State:
    mode = "off"  # "prime": parse then stop; "serve": return the primed workflow
    workflow: Any = None
    parser: Any = None
    original_parser: Any = None
    original_property: Any = None
    snakefile: Any = None


_state = _State()


def check_internals() -> None:
    """Raise :class:`Unsupported` unless Snakemake's internals are those this module was
    written for."""
    import snakemake

    version = getattr(snakemake, "__version__", "?")
    missing = internal_cli.missing()
    if missing:
        raise Unsupported(
            f"Snakemake {version}'s internals are not the ones the warm path was written for "
            f"(missing: {', '.join(missing)})"
        )


#: Modules Snakemake imports lazily while it runs a job (``script:``'s language detection
#: imports nbformat, with jsonschema; benchmarks; the DAG's toposort): imported once in
#: the zygote, so that every job's process has them (~0.1 s each otherwise).
PRELOAD = (
    "graphlib",
    "nbformat",
    "snakemake.benchmark",
    "snakemake.script",
    "snakemake.wrapper",
    "snakemake.notebook",
)


#: Attributes of a parsed ``Workflow`` that each job's process gets its own of.
WORKFLOW_ATTRIBUTES = (
    "logger_manager",
    "output_settings",
    "storage_settings",
    "start_time",
    "_snakemake_tmp_dir",
    "_async_runners",
    "_async_executor",
    "_async_lock",
)


def load() -> dict[str, Any]:
    """Import Snakemake and every plugin (building the argument parser once does), install
    the two hooks (inactive), and return the ``nargs`` of each per-job flag."""
    check_internals()
    import snakemake.cli as cli
    from snakemake.api import WorkflowApi

    _state.original_parser = cli.get_argument_parser
    _state.original_property = vars(WorkflowApi)["_workflow"]
    parser = _state.original_parser()
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # Snakemake's log header (Workflow.info_header: platform.platform()) asks for the
    # processor, which `platform` finds by running `uname -p` once per process: cached
    # here, every job forked from this process finds it (3 ms and a fork per job before;
    # `platform.uname()` alone leaves the field to its first reader).
    platform.uname().processor  # noqa: B018
    actions = getattr(parser, "_option_string_actions", {})
    missing = [flag for flag in PER_JOB_FLAGS if flag not in actions]
    if missing:
        raise Unsupported(
            f"Snakemake's command line has no {', '.join(missing)}: its job command is not "
            "the one the warm path was written for"
        )
    cli.get_argument_parser = _get_argument_parser
    WorkflowApi._workflow = property(_workflow)
    return {flag: actions[flag].nargs for flag in PER_JOB_FLAGS}


def _get_argument_parser(profiles: Any = None) -> Any:
    if _state.mode == "serve" and profiles is None and _state.parser is not None:
        return _state.parser
    return _state.original_parser(profiles)


def _workflow(self: Any) -> Any:
    if self._workflow_store is not None or _state.mode == "off":
        return _state.original_property.fget(self)
    if _state.mode == "prime":
        workflow = _state.original_property.fget(self)
        self._workflow_store = None  # its api's cleanup must not tear it down
        _state.snakefile = self.snakefile
        raise _Primed(workflow)
    if self.snakefile != _state.snakefile:
        return _state.original_property.fget(self)
    workflow = _state.workflow
    api = self.snakemake_api
    workflow.logger_manager = api.logger_manager
    workflow.output_settings = api.output_settings
    workflow.storage_settings = self.storage_settings  # --unneeded-temp-files
    workflow.start_time = datetime.now()
    workflow._snakemake_tmp_dir = tempfile.TemporaryDirectory(prefix="snakemake")
    workflow._async_runners = {}
    workflow._async_executor = ThreadPoolExecutor()
    workflow._async_lock = threading.Lock()
    self._workflow_store = workflow
    return workflow


def main_path() -> str:
    """``sys.argv[0]`` of ``python -m snakemake``."""
    import snakemake

    return os.path.join(os.path.dirname(snakemake.__file__), "__main__.py")


def prime(argv: Sequence[str]) -> Any:
    """Run Snakemake's ``main(argv)`` until it parsed the workflow; the parsed workflow.

    Raises :class:`Unsupported` if Snakemake ended before (it printed why)."""
    import snakemake.cli as cli

    _state.parser = _state.original_parser()  # fresh, for the jobs: never used here
    _state.mode = "prime"
    saved = sys.argv
    sys.argv = [main_path(), *argv]
    try:
        cli.main(list(argv))
    except _Primed as primed:
        workflow = primed.workflow
    except SystemExit as e:
        raise Unsupported(
            f"Snakemake exited with {e.code} before the workflow was parsed"
        ) from None
    else:
        raise Unsupported("Snakemake returned without parsing the workflow")
    finally:
        sys.argv = saved
        _state.mode = "off"
    missing = [name for name in WORKFLOW_ATTRIBUTES if not hasattr(workflow, name)]
    if missing:
        raise Unsupported(
            "Snakemake's parsed workflow is not the one the warm path was written for "
            f"(missing: {', '.join(missing)})"
        )
    if getattr(workflow.sourcecache, "runtime_cache", None) is not None:
        raise Unsupported(
            "the job command has no --runtime-source-cache-path (no shared source cache): "
            "each job would parse into a runtime source cache of its own"
        )
    _state.workflow = workflow
    return workflow


def quiesce(workflow: Any) -> None:
    """After :func:`prime`: end what the parse started that a fork must not copy: the
    asyncio runners and their thread pool (each job gets its own), and the parse's
    temporary directory."""
    with workflow._async_lock:
        for runner in workflow._async_runners.values():
            runner.close()
        workflow._async_runners = {}
    workflow._async_executor.shutdown(wait=True)
    workflow._snakemake_tmp_dir.cleanup()


def run(argv: Sequence[str]) -> int:
    """In a job's process: Snakemake's ``main(argv)`` on the primed workflow; its exit
    status."""
    import snakemake.cli as cli

    _state.mode = "serve"
    sys.argv = [main_path(), *argv]
    try:
        cli.main(list(argv))
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0

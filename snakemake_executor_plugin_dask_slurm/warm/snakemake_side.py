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
Every reach into Snakemake's code (the two replacements, the private ``Workflow``
attributes, ``main()`` itself) is a function of ``snakemake_internals.cli``; this module
decides when. What the warm path cannot run raises :class:`NotWarmable`, with a named
:class:`..worker.wire.Why`.

What would make this unnecessary upstream: an API call that runs one job of an already
parsed workflow (docs/architecture.md).
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..snakemake_internals import cli as internal_cli
from ..worker.wire import Cold, Why
from . import option_ends

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


class NotWarmable(Exception):
    """The warm path cannot run this job command: :attr:`NotWarmable.why` is the named
    reason (:class:`..worker.wire.Why`), :attr:`NotWarmable.detail` what of this case a
    user may need beyond the reason's text (the missing names, Snakemake's version; may be
    ""): the job's :class:`..worker.wire.Cold` is ``Cold(e.why, e.detail)``, and the
    message is its text."""

    why: Why
    detail: str

    def __init__(self, why: Why, detail: str = "") -> None:
        super().__init__(str(Cold(why, detail)))
        self.why = why
        self.detail = detail


class _Primed(BaseException):
    """Stops the server's run of ``main()`` once the workflow is parsed (a BaseException:
    ``main()`` catches every Exception)."""

    def __init__(self, workflow: Any):
        super().__init__("primed")
        self.workflow = workflow


def parse_key(argv: Sequence[str], nargs: dict[str, Any]) -> tuple[str, ...]:
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
    """Raise :class:`NotWarmable` unless Snakemake's internals are those this module was
    written for."""
    missing = internal_cli.missing()
    if missing:
        raise NotWarmable(
            Why.INTERNALS_CHANGED,
            f"Snakemake {internal_cli.version()}, missing: {', '.join(missing)}",
        )


def load() -> dict[str, Any]:
    """Import Snakemake and every plugin (building the argument parser once does), install
    the two hooks (inactive), and return the ``nargs`` of each per-job flag."""
    check_internals()
    _state.original_parser, _state.original_property = internal_cli.originals()
    parser = _state.original_parser()
    internal_cli.preload()
    # Snakemake's log header (Workflow.info_header: platform.platform()) asks for the
    # processor, which `platform` finds by running `uname -p` once per process: cached
    # here, every job forked from this process finds it (3 ms and a fork per job before;
    # `platform.uname()` alone leaves the field to its first reader).
    platform.uname().processor  # noqa: B018
    nargs = internal_cli.option_nargs(parser, PER_JOB_FLAGS)
    missing = [flag for flag in PER_JOB_FLAGS if flag not in nargs]
    if missing:
        raise NotWarmable(
            Why.INTERNALS_CHANGED,
            f"Snakemake {internal_cli.version()}, its command line has no {', '.join(missing)}",
        )
    internal_cli.hook_parse(_get_argument_parser, _workflow)
    return nargs


def _get_argument_parser(profiles: Any = None) -> Any:
    if _state.mode == "serve" and profiles is None and _state.parser is not None:
        return _state.parser
    parser = _state.original_parser(profiles)
    if _state.mode != "off":  # the prime's parse, a job's with profiles
        option_ends.remember_ends(parser)
    return parser


def _workflow(self: Any) -> Any:
    if internal_cli.stored(self) or _state.mode == "off":
        return _state.original_property.fget(self)
    if _state.mode == "prime":
        workflow = _state.original_property.fget(self)
        internal_cli.forget(self)  # its api's cleanup must not tear it down
        _state.snakefile = self.snakefile
        raise _Primed(workflow)
    if self.snakefile != _state.snakefile:
        return _state.original_property.fget(self)
    internal_cli.adopt(self, _state.workflow)
    return _state.workflow


def prime(argv: Sequence[str]) -> Any:
    """Run Snakemake's ``main(argv)`` until it parsed the workflow; the parsed workflow.

    Raises :class:`NotWarmable` if Snakemake ended before (it printed why), or if the
    parsed workflow cannot be served to jobs."""
    _state.parser = _state.original_parser()  # fresh, for the jobs: never used here
    option_ends.remember_ends(_state.parser)  # each job's parse, ~18 ms of CPU less
    _state.mode = "prime"
    saved = sys.argv
    sys.argv = [internal_cli.main_path(), *argv]
    try:
        internal_cli.run_main(argv)
    except _Primed as primed:
        workflow = primed.workflow
    except SystemExit as e:
        raise NotWarmable(
            Why.PARSE_FAILED, f"Snakemake exited with {e.code} before it was parsed"
        ) from None
    else:
        raise NotWarmable(Why.PARSE_FAILED, "Snakemake returned without parsing it")
    finally:
        sys.argv = saved
        _state.mode = "off"
    _check_parsed(workflow)
    _state.workflow = workflow
    return workflow


def _check_parsed(workflow: Any) -> None:
    missing = internal_cli.workflow_missing(workflow)
    if missing:
        raise NotWarmable(
            Why.INTERNALS_CHANGED,
            f"Snakemake {internal_cli.version()}, its parsed workflow has no {', '.join(missing)}",
        )
    if internal_cli.has_runtime_source_cache(workflow):
        raise NotWarmable(
            Why.NO_SOURCE_CACHE, "no --runtime-source-cache-path: each job would parse anew"
        )


def quiesce(workflow: Any) -> None:
    """After :func:`prime`: end what the parse started that a fork must not copy: the
    asyncio runners and their thread pool (each job gets its own), and the parse's
    temporary directory."""
    internal_cli.quiesce(workflow)


def run(argv: Sequence[str]) -> int:
    """In a job's process: Snakemake's ``main(argv)`` on the primed workflow; its exit
    status."""
    _state.mode = "serve"
    sys.argv = [internal_cli.main_path(), *argv]
    try:
        internal_cli.run_main(argv)
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0

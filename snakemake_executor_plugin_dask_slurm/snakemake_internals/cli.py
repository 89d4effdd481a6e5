"""Snakemake's command line and API (snakemake/cli.py, api.py, workflow.py): the warm path's
parse once, and the ``--target-jobs`` parser.

A warm job's process runs ``snakemake.cli.main(argv)`` (:func:`run_main`) with the workflow
its primed server parsed (warm/snakemake_side.py decides when): :func:`hook_parse` replaces
``cli.get_argument_parser`` and the ``WorkflowApi._workflow`` property, and
:func:`adopt` gives each job's process its own of some of the ``Workflow``'s attributes
(:data:`WORKFLOW_ATTRIBUTES`, some private). What that relies on being there is
:data:`WARM_PARSE`, checked by :func:`missing` (and :func:`option_nargs`,
:func:`workflow_missing` for what only a parser or a parsed workflow shows); what would
make it unnecessary upstream is an API call that runs one job of an already parsed
workflow (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from .guard import Touch, present

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


#: Modules Snakemake imports lazily while it runs a job (``script:``'s language detection
#: imports nbformat, with jsonschema; benchmarks; the DAG's toposort): imported once in
#: the zygote (:func:`preload`), so that every job's process has them (~0.1 s each
#: otherwise).
PRELOAD = (
    "graphlib",
    "nbformat",
    "snakemake.benchmark",
    "snakemake.script",
    "snakemake.wrapper",
    "snakemake.notebook",
)


def preload() -> None:
    """Import :data:`PRELOAD` (each that can be)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def missing() -> list[str]:
    """What the warm parse relies on that the running Snakemake lacks (empty: nothing)."""
    return [name for name, there in _names() if not there]


def version() -> str:
    """The running Snakemake's version ("?" if it does not say)."""
    import snakemake

    return str(getattr(snakemake, "__version__", "?"))


def package_dir() -> str:
    """The directory of Snakemake's package (its code, not the workflow's)."""
    import snakemake

    return os.path.dirname(snakemake.__file__)


def main_path() -> str:
    """``sys.argv[0]`` of ``python -m snakemake``."""
    return os.path.join(package_dir(), "__main__.py")


def run_main(argv: Sequence[str]) -> None:
    """Snakemake's entry point, ``snakemake.cli.main(argv)`` (it ends with SystemExit)."""
    import snakemake.cli as cli

    cli.main(list(argv))


def originals() -> tuple[Callable[..., Any], Any]:
    """Snakemake's own ``cli.get_argument_parser`` and ``WorkflowApi._workflow`` property
    (through any replacement of :func:`hook_parse`'s: what it was given is kept)."""
    import snakemake.cli as cli
    from snakemake.api import WorkflowApi

    return cli.get_argument_parser, vars(WorkflowApi)["_workflow"]


def hook_parse(get_argument_parser: Callable[..., Any], workflow: Callable[[Any], Any]) -> None:
    """Replace ``cli.get_argument_parser``, and the ``WorkflowApi._workflow`` property's
    getter (the property that parses the Snakefile)."""
    import snakemake.cli as cli
    from snakemake.api import WorkflowApi

    cli.get_argument_parser = get_argument_parser
    WorkflowApi._workflow = property(workflow)


def option_nargs(parser: Any, flags: Iterable[str]) -> dict[str, Any]:
    """``nargs`` of each of ``flags`` that Snakemake's argument parser has (read from
    argparse's private ``_option_string_actions``)."""
    actions = getattr(parser, "_option_string_actions", {})
    return {flag: actions[flag].nargs for flag in flags if flag in actions}


def stored(api: Any) -> bool:
    """Whether a ``WorkflowApi`` has parsed (or was given) its workflow."""
    return api._workflow_store is not None


def forget(api: Any) -> None:
    """Detach the workflow from its ``WorkflowApi``: the api's cleanup must not tear it down."""
    api._workflow_store = None


def adopt(api: Any, workflow: Any) -> None:
    """Give ``api`` (this process's ``WorkflowApi``) ``workflow``, parsed in another run of
    ``main()``, with what differs per run replaced: the logging, the storage settings
    (``--unneeded-temp-files`` is per job), a temporary directory, asyncio runners and a
    thread pool of its own, and the start time."""
    workflow.logger_manager = api.snakemake_api.logger_manager
    workflow.output_settings = api.snakemake_api.output_settings
    workflow.storage_settings = api.storage_settings
    workflow.start_time = datetime.now()
    workflow._snakemake_tmp_dir = tempfile.TemporaryDirectory(prefix="snakemake")
    workflow._async_runners = {}
    workflow._async_executor = ThreadPoolExecutor()
    workflow._async_lock = threading.Lock()
    api._workflow_store = workflow


def workflow_missing(workflow: Any) -> list[str]:
    """Which of :data:`WORKFLOW_ATTRIBUTES` a parsed workflow lacks."""
    return [name for name in WORKFLOW_ATTRIBUTES if not hasattr(workflow, name)]


def has_runtime_source_cache(workflow: Any) -> bool:
    """Whether a parsed workflow caches its sources in a runtime cache of its own (its job
    command had no ``--runtime-source-cache-path``)."""
    return getattr(workflow.sourcecache, "runtime_cache", None) is not None


def source_cache_paths(workflow: Any) -> tuple[str, str]:
    """A parsed workflow's source caches (``SourceCache.cache_path`` and
    ``runtime_cache_path``): where Snakemake keeps copies of the workflow's sources."""
    sourcecache = workflow.sourcecache
    return str(sourcecache.cache_path), str(sourcecache.runtime_cache_path)


def quiesce(workflow: Any) -> None:
    """End what a parse started that a fork must not copy: the asyncio runners and their
    thread pool, and the parse's temporary directory."""
    with workflow._async_lock:
        for runner in workflow._async_runners.values():
            runner.close()
        workflow._async_runners = {}
    workflow._async_executor.shutdown(wait=True)
    workflow._snakemake_tmp_dir.cleanup()


def parse_target_jobs(encoded: Any) -> Any:
    """Snakemake's own parse of ``--target-jobs`` arguments (snakemake/target_jobs.py)."""
    from snakemake.target_jobs import parse_target_jobs_cli_args

    return parse_target_jobs_cli_args(encoded)


def _names() -> list[tuple[str, bool]]:
    import snakemake.cli as cli
    from snakemake.api import WorkflowApi
    from snakemake.workflow import Workflow

    return [
        ("snakemake 9.x", version().startswith("9.")),
        ("cli.main", callable(getattr(cli, "main", None))),
        ("cli.parse_args", callable(getattr(cli, "parse_args", None))),
        ("cli.get_argument_parser", callable(getattr(cli, "get_argument_parser", None))),
        ("WorkflowApi._workflow", isinstance(vars(WorkflowApi).get("_workflow"), property)),
        ("WorkflowApi._workflow_store", "_workflow_store" in WorkflowApi.__dataclass_fields__),
        ("Workflow.start_time", "start_time" in Workflow.__dataclass_fields__),
        ("Workflow.async_run", callable(getattr(Workflow, "async_run", None))),
    ]


WARM_PARSE = Touch(
    name="warm parse",
    kind="hook",
    what="cli.main, cli.get_argument_parser and WorkflowApi._workflow (cli.py, api.py)",
    written_for="9.27.1",
    without="every job that would go the warm way goes the cold way (a fresh Snakemake)",
    found=lambda: present(_names()),
    fingerprint=(
        "snakemake 9.x,cli.main,cli.parse_args,cli.get_argument_parser,WorkflowApi._workflow,"
        "WorkflowApi._workflow_store,Workflow.start_time,Workflow.async_run"
    ),
)
TOUCHES = (WARM_PARSE,)

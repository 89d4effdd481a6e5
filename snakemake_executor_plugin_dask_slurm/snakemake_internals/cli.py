"""Snakemake's command line and API (snakemake/cli.py, api.py, workflow.py): the warm path's
parse once.

A warm job's process runs ``snakemake.cli.main(argv)`` with the workflow its primed server
parsed (warm/snakemake_side.py): it replaces ``cli.get_argument_parser`` and the
``WorkflowApi._workflow`` property, and gives each job's process its own of some of the
``Workflow``'s attributes. What that relies on being there is :data:`WARM_PARSE`; what
would make it unnecessary upstream is an API call that runs one job of an already parsed
workflow (docs/architecture.md).
"""

from __future__ import annotations

from .guard import Touch, present


def missing() -> list[str]:
    """What the warm parse relies on that the running Snakemake lacks (empty: nothing)."""
    return [name for name, there in _names() if not there]


def _names() -> list[tuple[str, bool]]:
    import snakemake
    import snakemake.cli as cli
    from snakemake.api import WorkflowApi
    from snakemake.workflow import Workflow

    version = str(getattr(snakemake, "__version__", "?"))
    return [
        ("snakemake 9.x", version.startswith("9.")),
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

"""The plugin's error type.

A subclass of Snakemake's ``WorkflowError`` so that Snakemake prints the message as a
plain error, without a traceback: every message here already says what happened, why,
and what to do.
"""

from snakemake_interface_common.exceptions import WorkflowError


class DaskSlurmError(WorkflowError):
    """Something the user can act on went wrong in the plugin."""

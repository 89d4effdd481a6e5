"""The plugin's error type.

A subclass of Snakemake's ``WorkflowError`` so that Snakemake prints the message as a
plain error: every message here already says what happened, why, and what to do.
"""

from types import TracebackType
from typing import Any

from snakemake_interface_common.exceptions import WorkflowError


class DaskSlurmError(WorkflowError):
    """Something the user can act on went wrong in the plugin.

    Snakemake prints a ``WorkflowError`` with the frames of its traceback outside
    Snakemake's own package (``snakemake.exceptions.cut_traceback``): for this error, the
    plugin's, three lines of no use to whoever reads the sentence above them. So Python
    code reading ``__traceback__`` sees none; the interpreter's own (C) slot keeps it, so
    an uncaught one still prints in full, and :attr:`plugin_traceback` has it.
    """

    @property
    def __traceback__(self) -> None:
        return None

    @__traceback__.setter
    def __traceback__(self, value: TracebackType | None) -> None:
        BaseException.with_traceback(self, value)

    @property
    def plugin_traceback(self) -> TracebackType | None:
        """Where it was raised (``__traceback__`` as Python would show it)."""
        slot: Any = vars(BaseException)["__traceback__"]
        return slot.__get__(self)

"""One line to the user at a level, as the executor says it (standard library only: the
executor's module imports it when Snakemake loads the plugin)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: What every line of the plugin starts with in Snakemake's log.
PREFIX = "dask-slurm: "


def _unsaid(line: str) -> None:
    """A debug line where nobody asked for them."""


@dataclass(frozen=True)
class Say:
    """One line to the user, at INFO, WARNING or ERROR (or DEBUG: with --verbose)."""

    info: Callable[[str], None]
    warn: Callable[[str], None]
    error: Callable[[str], None]
    debug: Callable[[str], None] = _unsaid

    @classmethod
    def to(cls, logger: Any) -> Say:
        """Each line to Snakemake's ``logger``, after :data:`PREFIX`."""
        return cls(
            lambda line: logger.info(f"{PREFIX}{line}"),
            lambda line: logger.warning(f"{PREFIX}{line}"),
            lambda line: logger.error(f"{PREFIX}{line}"),
            lambda line: logger.debug(f"{PREFIX}{line}"),
        )

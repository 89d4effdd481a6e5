"""Snakemake's logger (snakemake/logging.py): the lines the plugin writes as Snakemake's own
(the direct way's "Activating environment modules", a warm group member's "spawned job").

Public API, but Snakemake's module all the same: imported here, inside the functions, so
that no module outside this room imports Snakemake.
"""

from __future__ import annotations


def info(message: str) -> None:
    """``message`` at info level on Snakemake's logger."""
    from snakemake.logging import logger

    logger.info(message)


def debug(message: str) -> None:
    """``message`` at debug level on Snakemake's logger."""
    from snakemake.logging import logger

    logger.debug(message)

"""Snakemake executor plugin: run a workflow's jobs as Dask tasks, on this machine or on
every node of a SLURM allocation (workers started with srun).

This module only names what Snakemake looks for (``Executor``, ``ExecutorSettings``,
``common_settings``), and imports them only when Snakemake asks: the same package also
runs on every Dask worker (its supervisor and task modules), where importing Snakemake
would only cost time. See docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .executor import Executor
    from .settings import ExecutorSettings, common_settings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]


def __getattr__(name: str) -> Any:
    if name == "Executor":
        from .executor import Executor

        return Executor
    if name in ("ExecutorSettings", "common_settings"):
        from . import settings

        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

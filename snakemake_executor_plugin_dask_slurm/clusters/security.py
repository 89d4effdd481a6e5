"""How this run's Dask processes and client authenticate: one object per run, an input of
the plan (:mod:`.spec`) and of the client connection (:func:`.base.connect`).

Today a run uses Dask's defaults (plain TCP; the scheduler listens on loopback in local
mode and on the allocation's network in srun mode). Per-run TLS credentials change this
object, not its users: the scheduler and worker options and the client's ``security=``
all come from here, and :meth:`RunSecurity.close` removes whatever it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunSecurity:
    """No credentials: Dask's defaults."""

    def scheduler_args(self) -> tuple[str, ...]:
        """Extra ``dask scheduler`` options."""
        return ()

    def worker_args(self) -> tuple[str, ...]:
        """Extra ``dask worker`` options."""
        return ()

    def client(self) -> Any:
        """The ``security=`` argument of the plugin's client (None: Dask's defaults)."""
        return None

    def close(self) -> None:
        """Remove whatever this run's security made (nothing yet)."""

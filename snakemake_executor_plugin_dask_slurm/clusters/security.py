"""The one place where the connection security of the plugin's Dask cluster is decided.

Today every cluster the plugin starts uses Dask's defaults (plain TCP; the scheduler
listens only on loopback in local mode and on the allocation's network in srun mode).
The scheduler command, the worker command and the client connection all take their
security options from here, so making TLS with per-run credentials the default changes
this module only.
"""

from __future__ import annotations

from typing import Any


def scheduler_security_args() -> tuple[str, ...]:
    """Extra ``dask scheduler`` options for security (none yet: Dask's defaults)."""
    return ()


def worker_security_args() -> tuple[str, ...]:
    """Extra ``dask worker`` options for security (none yet: Dask's defaults)."""
    return ()


def client_security() -> Any:
    """The ``security=`` argument for the plugin's client (None: Dask's defaults)."""
    return None

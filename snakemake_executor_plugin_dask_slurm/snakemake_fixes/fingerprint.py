"""What a fix was written against: the source text of the Snakemake functions it replaces,
wraps or relies on, hashed.

A fix is installed only when the running Snakemake's functions hash to the value recorded
with the fix (byte-for-byte the same source); any other Snakemake is left untouched. The
source text, not the code object, is hashed: bytecode differs between Python versions
for the same Snakemake, the source does not.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

#: Set on every replacement this package installs: the function it replaced.
REPLACES = "__dask_slurm_replaces__"


def original(function: Any) -> Any:
    """``function`` as Snakemake defines it: through any replacement of ours."""
    while hasattr(function, REPLACES):
        function = getattr(function, REPLACES)
    return function


def digest(functions: Sequence[Callable[..., Any]]) -> str | None:
    """sha256 of the functions' source texts (each Snakemake's own, see :func:`original`),
    in order; None if a source cannot be read (no .py files installed)."""
    h = hashlib.sha256()
    for function in functions:
        try:
            text = inspect.getsource(original(function))
        except (OSError, TypeError):
            return None
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()


def mark(replacement: Any, replaced: Any) -> Any:
    """Record on ``replacement`` the function it replaces."""
    setattr(replacement, REPLACES, replaced)
    return replacement

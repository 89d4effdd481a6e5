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


def source_of(function: Callable[..., Any]) -> str:
    """Snakemake's own source text of ``function`` (through any replacement of ours)."""
    return inspect.getsource(original(function))


def lines_naming(source: str, name: str) -> list[str]:
    """The lines of ``source`` that mention ``name``, stripped: how a function uses it,
    without the rest of the function (whose unrelated edits a fix does not depend on)."""
    return [line.strip() for line in source.splitlines() if name in line]


def nested_block(source: str, header: str) -> list[str]:
    """The lines, stripped, of the block that starts with the line ``header`` (e.g. a
    nested ``def``) in ``source``: that line and every deeper-indented line after it."""
    lines = source.splitlines()
    for at, line in enumerate(lines):
        if line.strip() == header:
            depth = len(line) - len(line.lstrip())
            block = [line.strip()]
            for following in lines[at + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= depth:
                    break
                if following.strip():
                    block.append(following.strip())
            return block
    return []


def digest_texts(texts: Sequence[str]) -> str:
    """sha256 of ``texts`` in order (what a narrowed fingerprint hashes)."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()


def mark(replacement: Any, replaced: Any) -> Any:
    """Record on ``replacement`` the function it replaces."""
    setattr(replacement, REPLACES, replaced)
    return replacement

"""What each touch of Snakemake's code was written against, and how that is checked.

A :class:`Touch` is one place where the plugin relies on Snakemake's code beyond its plugin
interfaces: a fix it installs, a hook of Snakemake's code a warm process installs, or a
read of Snakemake's objects. Each declares what it touches, the release it was written
for, its fingerprint and what the user loses without it.

A fingerprint is a sha256 of source text: of the Snakemake functions a touch replaces
whole, and of only the lines it relies on in a function it wraps or hands something to
(:func:`lines_naming`, :func:`nested_block`), so that unrelated edits in a patch release
do not switch it off. The source text, not the code object, is hashed: bytecode differs
between Python versions for the same Snakemake, the source does not. A touch whose
running Snakemake does not match is not installed, and Snakemake is left as it is.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

#: What a touch does: ``fix`` — replaces Snakemake's code in the main process, installed at
#: the executor's start; ``hook`` — replaces it in a warm process, installed there by its
#: owner (warm/); ``read`` — reads Snakemake's objects or private names.
Kind = Literal["fix", "hook", "read"]


@dataclass
class Touch:
    """One reach into Snakemake's code (see the module's docstring)."""

    name: str
    kind: Kind
    #: Snakemake's code it relies on (functions, files).
    what: str
    #: The Snakemake release it was written and checked for.
    written_for: str
    #: What is lost when it is not installed (the end of the log line that says so).
    without: str
    #: The fingerprint of the running Snakemake's code (None: unreadable or not there).
    found: Callable[[], str | None]
    #: The fingerprint it was written for.
    fingerprint: str
    #: Installs it (fixes: at the executor's start; hooks: by their owner).
    apply: Callable[[], None] | None = None

    def matches(self) -> bool:
        try:
            return self.found() == self.fingerprint
        except (ImportError, AttributeError):
            return False

    def not_installed(self) -> str:
        return (
            f"Snakemake's {self.what} is not the code the plugin's {WORDS[self.kind]} was "
            f"written for (Snakemake {self.written_for}); Snakemake is left as it is: "
            f"{self.without}"
        )


#: How the log line names each kind of touch.
WORDS: dict[str, str] = {"fix": "fix", "hook": "hook", "read": "reading of it"}

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


def present(names: Sequence[tuple[str, bool]]) -> str:
    """The fingerprint of a touch that relies on names being there, not on their source:
    the names that are, in order (what :data:`Touch.fingerprint` lists when all are)."""
    return ",".join(name for name, there in names if there)

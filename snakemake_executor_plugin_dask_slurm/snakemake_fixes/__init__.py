"""Guarded fixes of Snakemake's own code that a large task farm would otherwise suffer from.

Each fix replaces or wraps named Snakemake functions, is exactly equivalent to them
(tests/component/test_snakemake_fixes.py compares them on generated jobs) and is installed
only when what it relies on in the running Snakemake is byte-for-byte what it was written
against (:mod:`.fingerprint`): the whole source of a function it replaces, and of a
function it only wraps or hands something to, the lines that matter to it (a module's
``relied_on``), so that unrelated edits in a patch release do not switch it off. Any other
Snakemake is left as it is, and the run's log says so in one line per fix. Installed once
per process, at the executor's start (:func:`install`); the patches to Snakemake that
make them unnecessary are in docs/upstream/, described in docs/further.md.

- :mod:`.prepare_inputs`: a job with N inputs (a farm's ``rule all``) is prepared in time
  linear in N, not N².
- :mod:`.remaining_jobs`: the list of remaining jobs is made only when a job selector
  reads it, not every scheduling round.
- :mod:`.first_round`: the plugin's scheduling settings apply before Snakemake's first
  scheduling round, not from its second (:func:`before_first_round`).
- :mod:`.greedy_selection`: the greedy job selector passes over the selectable jobs once
  per round, not once per job it selects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from . import first_round, greedy_selection, prepare_inputs, remaining_jobs
from .fingerprint import digest
from .first_round import before_first_round

__all__ = ["FIXES", "before_first_round", "install"]


@dataclass(frozen=True)
class Fix:
    module: ModuleType

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    def targets(self) -> Sequence[Callable[..., Any]]:
        targets: Sequence[Callable[..., Any]] = self.module.targets()
        return targets

    def found(self) -> str | None:
        """The fingerprint of what the fix relies on in the running Snakemake: the source
        of the functions it replaces, or what its module narrows that to (its ``found``);
        None: unreadable."""
        try:
            narrowed = getattr(self.module, "found", None)
            if narrowed is not None:
                value: str | None = narrowed()
                return value
            return digest(self.targets())
        except (ImportError, AttributeError):
            return None

    def matches(self) -> bool:
        return self.found() == self.module.FINGERPRINT

    def not_installed(self) -> str:
        return (
            f"Snakemake's {self.module.WHAT} is not the code the plugin's fix was written "
            f"for (Snakemake {self.module.WRITTEN_FOR}); Snakemake is left as it is: "
            f"{self.module.WITHOUT}"
        )


FIXES = (Fix(prepare_inputs), Fix(remaining_jobs), Fix(first_round), Fix(greedy_selection))

_lock = threading.Lock()
_installed: dict[str, bool] = {}


def install(note: Callable[[str], None]) -> dict[str, bool]:
    """Install every fix whose fingerprint matches (once per process); ``note`` gets one
    line for each fix that is not installed, at every call. Which fixes are installed."""
    with _lock:
        for fix in FIXES:
            if fix.name not in _installed:
                _installed[fix.name] = fix.matches()
                if _installed[fix.name]:
                    fix.module.apply()
        result = dict(_installed)
    for fix in FIXES:
        if not result[fix.name]:
            note(fix.not_installed())
    return result

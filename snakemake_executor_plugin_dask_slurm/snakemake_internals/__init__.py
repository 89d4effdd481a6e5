"""Every reach of the plugin into Snakemake's code beyond its plugin interfaces, in one room.

One module per Snakemake area; each declares its touches (:class:`.guard.Touch`): what of
Snakemake's code it relies on, the release it was written for, its fingerprint (of only
what it relies on) and what is lost without it. :data:`TOUCHES` is the one registry;
tests/component/test_snakemake_internals.py checks every entry against the installed
Snakemake (it fails loudly on a release that changes one) and the fixes against
Snakemake's own functions.

- :mod:`.scheduler` — ``JobScheduler``: the remaining-jobs list made only when read, a
  call before the first scheduling round, the plugin's scheduling settings set on it.
- :mod:`.rounds` — ``JobScheduler``'s rounds: one after a burst of completions, one more
  while a round's whole subsample fits.
- :mod:`.greedy` — the greedy job selector: one pass in reward order per round, not one
  per job it selects.
- :mod:`.jobs` — ``Job.prepare``: a job with N inputs prepared in time linear in N;
  ``Job.log_info``: the job's shell command formatted once for its info record.
- :mod:`.shell` — ``snakemake.shell``: its wrapper (executable, prefix, suffix), its
  ``subprocess`` swapped for a warm script's, its ``kill`` made to remember kills; a
  ``shell:`` rule's compiled function read and its job's command formatted (the direct
  way).
- :mod:`.script` — ``PythonScript.execute_script``: a warm job's Python script forked
  from the zygote.
- :mod:`.cli` — ``snakemake.cli`` and ``WorkflowApi``: the warm path's parse once (the
  two replacements, the private ``Workflow`` attributes, ``main()``), the
  ``--target-jobs`` parser, Snakemake's package directory.
- :mod:`.local_executor` — ``Executor.spawn_job``: a group's ``run:`` members warm.
- :mod:`.deployment` — rules' conda, container and environment modules, and the run's
  deployment methods, on Snakemake 9 and on the shape of Snakemake 10 (PR #3339).

This package imports only the standard library and Snakemake, and Snakemake only inside
functions: it is a leaf that ``warm/`` (a warm process) and ``dispatch/`` may import. No
module outside it imports Snakemake itself (public API included), except the entry
points tests/component/test_layering.py lists (``ENTRY_POINTS``: a group job's own
``snakemake.cli.main``).
Fixes are installed once per process at the executor's start (:func:`install`), the only
change to Snakemake in the main process; hooks are installed by their owners in warm
processes. The patches to Snakemake that would make the fixes unnecessary are in
docs/upstream/, described in docs/further.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import cli, deployment, greedy, jobs, local_executor, rounds, scheduler, script, shell
from .guard import Touch
from .scheduler import before_first_round

__all__ = ["FIXES", "TOUCHES", "Touch", "before_first_round", "install"]

#: Every touch, by area.
TOUCHES: tuple[Touch, ...] = (
    *jobs.TOUCHES,
    *scheduler.TOUCHES,
    *rounds.TOUCHES,
    *greedy.TOUCHES,
    *shell.TOUCHES,
    *script.TOUCHES,
    *cli.TOUCHES,
    *local_executor.TOUCHES,
    *deployment.TOUCHES,
)
#: The touches installed in the main process at the executor's start.
FIXES: tuple[Touch, ...] = tuple(t for t in TOUCHES if t.kind == "fix")

_lock = threading.Lock()
_installed: dict[str, bool] = {}


def install(note: Callable[[str], None]) -> dict[str, bool]:
    """Install every fix whose fingerprint matches (once per process); ``note`` gets one
    line for each fix that is not installed, at every call. Which fixes are installed."""
    with _lock:
        for fix in FIXES:
            if fix.name not in _installed:
                _installed[fix.name] = fix.matches()
                if _installed[fix.name] and fix.apply is not None:
                    fix.apply()
        result = dict(_installed)
    for fix in FIXES:
        if not result[fix.name]:
            note(fix.not_installed())
    return result

"""A Dask process of the plugin's leaves at once once its work is done (issue 32).

A Dask worker took 0.3-1.1 s of CPU after its "End worker", and the scheduler about 0.3 s
after its "End scheduler", in CPython's finalization: it collects garbage over every
object still alive (distributed's, numpy's, ...) while it clears the modules, with no
Python frame in sight (measured with strace and perf: ``gc_collect_main`` on top). The
run's close waits for these exits. Moving every object alive at exit into the permanent
generation (:func:`gc.freeze`) makes those collections skip them: the worker then leaves
0.1 s after it unregistered. Objects are still freed by their reference counts as the
modules are cleared; only cycles among them are left to the operating system, which a
process that exits frees anyway. Used only in the plugin's own scheduler and workers
(which write nothing buffered at that point: their logs are stderr), never in
Snakemake's process.
"""

from __future__ import annotations

import atexit
import gc


def skip_final_collections() -> None:
    """Freeze every object alive now: the interpreter's last collections pass them by."""
    gc.freeze()


def at_exit() -> None:
    """Skip the final collections when this process exits (see the module's text)."""
    atexit.register(skip_final_collections)

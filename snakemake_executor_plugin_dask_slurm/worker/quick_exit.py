"""A Dask process of the plugin's leaves at once once its work is done (issue 32).

A Dask worker took 0.3-1.1 s of CPU after its "End worker", and the scheduler about 0.3 s
after its "End scheduler", in CPython's finalization: it collects garbage over every
object still alive (distributed's, numpy's, ...) while it clears the modules, with no
Python frame in sight (measured with strace and perf: ``gc_collect_main`` on top). The
run's close waits for these exits. Moving every object alive at exit into the permanent
generation (:func:`gc.freeze`) makes those collections skip them: the worker then leaves
0.1 s after it unregistered. Objects are still freed by their reference counts as the
modules are cleared; only cycles among them are left to the operating system, which a
process that exits frees anyway. Used in the plugin's own scheduler and workers (which
write nothing buffered at that point: their logs are stderr) as it is, and in Snakemake's
process after one collection (:func:`collect_then_skip_at_exit`).
"""

from __future__ import annotations

import _io
import atexit
import gc
import logging
import os
import sys
from typing import Any


def skip_final_collections() -> None:
    """Freeze every object alive now: the interpreter's last collections pass them by."""
    gc.freeze()


def at_exit() -> None:
    """Skip the final collections when this process exits (see the module's text)."""
    atexit.register(skip_final_collections)


#: Set to 1 in Snakemake's environment: its process exits as the interpreter would, with
#: its final collections (for a workflow whose own code leaves a writer open that only
#: a collection at exit would finish, of a kind :func:`writers_left_open` does not know).
FULL_EXIT_VARIABLE = "DASK_SLURM_FULL_EXIT"


def collect_then_skip() -> None:
    """Collect what is garbage now, then freeze what is alive, unless a writer is left
    open that nothing else finishes at exit (:func:`writers_left_open`) or anything goes
    wrong on the way: then the interpreter's exit is left as it is."""
    try:
        gc.collect()  # first: a file that only garbage held is closed by it
        if not writers_left_open():
            gc.freeze()
    except Exception:  # an exit as the interpreter's, never a traceback at exit
        return


def writers_left_open() -> list[object]:
    """What the final collections would finish: files open for writing (not in memory,
    not the standard streams, which the interpreter flushes itself, not the logging
    handlers', which logging's exit handler, run after this one, flushes and closes),
    open SQLite connections (closing one checkpoints its write-ahead log) and open dbm
    files."""
    known: set[int] = set()
    streams: list[object] = [sys.stdin, sys.stdout, sys.stderr]
    streams += [sys.__stdin__, sys.__stdout__, sys.__stderr__]
    handlers = [ref() for ref in list(getattr(logging, "_handlerList", ()))]  # shutdown's
    loggers = [logging.getLogger(), *list(logging.Logger.manager.loggerDict.values())]
    handlers += [h for logger in loggers for h in getattr(logger, "handlers", ())]
    streams += [getattr(handler, "stream", None) for handler in handlers]
    for stream in streams:  # a text stream, its buffer, its raw file
        while stream is not None and id(stream) not in known:
            known.add(id(stream))
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    stores = _store_types()
    left: list[object] = []
    for obj in gc.get_objects():
        kind = type(obj)  # never obj.__class__: a dead weakref proxy raises there
        if issubclass(kind, _io._IOBase):
            if id(obj) not in known and not issubclass(kind, IN_MEMORY) and _writing(obj):
                left.append(obj)
        elif issubclass(kind, stores) and _open_store(obj):
            left.append(obj)
    return left


IN_MEMORY = (_io.StringIO, _io.BytesIO)


def _writing(obj: Any) -> bool:
    try:
        return not obj.closed and bool(obj.writable())
    except Exception:  # a file that cannot say: count it as open
        return True


def _store_types() -> tuple[type, ...]:
    found: list[type] = []
    for module, name in (("sqlite3", "Connection"), ("_gdbm", "gdbm"), ("_dbm", "dbm")):
        loaded = sys.modules.get(module)  # only what the process imported can be open
        kind = getattr(loaded, name, None)
        if isinstance(kind, type):
            found.append(kind)
    return tuple(found)


def _open_store(obj: Any) -> bool:
    try:
        if hasattr(obj, "total_changes"):  # sqlite3: raises once closed
            obj.total_changes  # noqa: B018
        else:
            obj.get(b"\0dask-slurm")  # dbm: raises once closed
    except Exception:
        return False
    return True


_armed: list[bool] = []


def collect_then_skip_at_exit() -> None:
    """For Snakemake's process, from the executor's ``shutdown()`` (once per process):
    :func:`collect_then_skip` as the first exit handler. Snakemake's process, with Dask's
    client and the plugin imported, spent 0.3-0.45 s after its last line in CPython's
    final collections (docs/benchmarks.md, 2026-12-04). The exit handlers after it
    (logging's, which flushes and closes every handler; the plugin's; Dask's) run as
    before: the freeze changes no reference count, only which objects the cycle
    collector visits. A file left open for writing (a Snakefile's ``LOG = open(...)``
    held by a cycle, written by ``onsuccess:``) would then never be closed, and its
    buffered end lost, where the local executor's exit writes it; an open SQLite
    connection would leave its write-ahead log unmerged. So when
    :func:`writers_left_open` finds such a writer (35 ms over Snakemake's ~140,000
    objects), nothing is frozen; nor with ``DASK_SLURM_FULL_EXIT=1`` (a writer of another
    kind: a native library's). What it gives up otherwise: the other finalizers
    (``__del__``) of objects alive at that moment that only module teardown leaves in a
    garbage cycle, which CPython does not promise to run at exit ("It is not guaranteed
    that __del__() methods are called for objects that still exist when the interpreter
    exits", the data model's
    text) and which, run then, find the builtins gone."""
    if not _armed and os.environ.get(FULL_EXIT_VARIABLE) != "1":
        _armed.append(True)
        atexit.register(collect_then_skip)

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
import sys


def skip_final_collections() -> None:
    """Freeze every object alive now: the interpreter's last collections pass them by."""
    gc.freeze()


def at_exit() -> None:
    """Skip the final collections when this process exits (see the module's text)."""
    atexit.register(skip_final_collections)


def collect_then_skip() -> None:
    """Collect what is garbage now, then freeze what is alive, unless a file is open for
    writing that nothing else flushes at exit (:func:`files_left_open`): then the
    interpreter's exit is left as it is, so that such a file still gets its end."""
    if files_left_open():
        return
    gc.collect()
    gc.freeze()


def files_left_open() -> list[object]:
    """Files open for writing in this process other than the standard streams (which the
    interpreter flushes itself) and the handlers' of the loggers (which logging's exit
    handler, run after this one, flushes and closes): what only the final collections
    would close."""
    known: set[int] = set()
    streams: list[object] = [sys.stdin, sys.stdout, sys.stderr]
    streams += [sys.__stdin__, sys.__stdout__, sys.__stderr__]
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):  # placeholders have none
            streams.append(getattr(handler, "stream", None))
    for stream in streams:  # a text stream, its buffer, its raw file
        while stream is not None and id(stream) not in known:
            known.add(id(stream))
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    left: list[object] = []
    for obj in gc.get_objects():
        if isinstance(obj, _io._IOBase) and id(obj) not in known:  # every io class's base
            try:
                if not obj.closed and obj.writable():
                    left.append(obj)
            except Exception:  # a file that cannot say: count it as open
                left.append(obj)
    return left


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
    buffered end lost, where the local executor's exit writes it: so when
    :func:`files_left_open` finds one (35 ms over Snakemake's ~140,000 objects), nothing
    is frozen. What it gives up otherwise: the other finalizers (``__del__``) of objects
    alive at that moment that only module teardown leaves in a garbage cycle, which
    CPython does not promise to run at exit ("It is not guaranteed that __del__() methods
    are called for objects that still exist when the interpreter exits", the data model's
    text) and which, run then, find the builtins gone."""
    if not _armed:
        _armed.append(True)
        atexit.register(collect_then_skip)

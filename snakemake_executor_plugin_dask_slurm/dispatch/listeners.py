"""What else of the run wants to know about its jobs and workers (the allocation's clock
learns how long each rule's jobs take; the usage report records every attempt and every
worker): one small interface, called by dispatch's two ends (:mod:`.ends`), the
dispatcher and the run's glue (its end), so that a new listener needs no new hook. A
listener overrides what it needs; the rest does nothing.

Listeners run on the thread that calls them (Snakemake's scheduling thread for
``handed_over`` and ``refused``, the status or recovery thread for ``ended``, Dask's event
thread for the workers): they must be quick and must not block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .outcomes import Finished
from .registry import JobRecord


class JobListener:
    def handed_over(self, records: Sequence[JobRecord]) -> None:
        """These jobs went to Dask (a rerun too: its record has the new task)."""

    def refused(self, keys: Sequence[str]) -> None:
        """These jobs, announced to Snakemake, were not started: the run stops."""

    def moved(self, old_key: str, record: JobRecord) -> None:
        """The job of ``old_key`` never started where it was (no time left there): it went
        to Dask again as ``record``'s task."""

    def ended(self, record: JobRecord, finished: Finished) -> None:
        """The task of ``record`` ended (succeeded, failed, or lost with its worker)."""

    def workers_seen(self, workers: Mapping[str, Mapping[str, Any]]) -> None:
        """The workers registered now, as the scheduler describes them (by address): at
        start and whenever one joins (already known ones come again)."""

    def worker_left(self, name: str) -> None:
        """The worker ``name`` left the scheduler (retired, lost, or at the end)."""

    def run_ending(self, command: str) -> None:
        """The run is over (any way: success, failure, Ctrl-C, landing) and its cluster is
        about to close: start what can overlap the close (``command``: how to run it
        again)."""

    def run_ended(self, command: str) -> None:
        """The run is over and its cluster closed: say what there is to say."""


class Listeners(list[JobListener]):
    """Every listener of the run, called in turn (none: nothing to do, at no cost)."""

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        for listener in self:
            listener.handed_over(records)

    def refused(self, keys: Sequence[str]) -> None:
        for listener in self:
            listener.refused(keys)

    def moved(self, old_key: str, record: JobRecord) -> None:
        for listener in self:
            listener.moved(old_key, record)

    def ended(self, record: JobRecord, finished: Finished) -> None:
        for listener in self:
            listener.ended(record, finished)

    def workers_seen(self, workers: Mapping[str, Mapping[str, Any]]) -> None:
        for listener in self:
            listener.workers_seen(workers)

    def worker_left(self, name: str) -> None:
        for listener in self:
            listener.worker_left(name)

    def run_ending(self, command: str) -> None:
        for listener in self:
            listener.run_ending(command)

    def run_ended(self, command: str) -> None:
        for listener in self:
            listener.run_ended(command)

"""What else of the run wants to know about its jobs (the allocation's clock learns how
long each rule's jobs take; the efficiency report records every attempt): one small
interface, called by the run's glue, so that a new listener needs no new hook.

Listeners run on the thread that calls them (Snakemake's scheduling thread for
``handed_over`` and ``refused``, the status or recovery thread for ``ended``): they must
be quick and must not block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .outcomes import Finished
from .registry import JobRecord


class JobListener(Protocol):
    def handed_over(self, records: Sequence[JobRecord]) -> None:
        """These jobs went to Dask (a rerun too: its record has the new task)."""

    def refused(self, keys: Sequence[str]) -> None:
        """These jobs, announced to Snakemake, were not started: the run stops."""

    def ended(self, record: JobRecord, finished: Finished) -> None:
        """The task of ``record`` ended (succeeded, failed, or lost with its worker)."""


class Listeners(list[JobListener]):
    """Every listener of the run, called in turn (none: nothing to do, at no cost)."""

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        for listener in self:
            listener.handed_over(records)

    def refused(self, keys: Sequence[str]) -> None:
        for listener in self:
            listener.refused(keys)

    def ended(self, record: JobRecord, finished: Finished) -> None:
        for listener in self:
            listener.ended(record, finished)

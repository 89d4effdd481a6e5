"""Where a job may go, by time: the run's own clock (:class:`.allocation.AllocationClock`,
inside an allocation with a time limit) and, when the run's workers end at different times
(worker jobs with a time limit), the runway of :mod:`...worker.clock`.

On Snakemake's scheduling thread, per job (:class:`..intake.Intake`): :meth:`Placement.check`
says whether it may start at all and how long it is expected to take; then the job asks
Dask for the runway point it needs (:meth:`Placement.runway_name`) and its task carries
what it needs before a worker's landing point (:meth:`Placement.needs`), which the worker
checks again when it starts it. When a job is handed over again (it did not start where
it was, it was stopped at a worker job's limit, its worker died), :meth:`Placement.again`
refreshes both, or says why it can no longer go anywhere.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ...report.messages import job_label
from ...worker.clock import Runway, is_runway, runway_request
from ..listeners import JobListener
from ..outcomes import Finished
from ..registry import JobRecord
from .allocation import AllocationClock
from .policy import (
    Durations,
    Expected,
    expected_duration,
    fits,
    worker_job_refusal,
)


class Placement(JobListener):
    """The run's placement by time (None of it without a clock: see :meth:`for_run`)."""

    def __init__(
        self,
        clock: AllocationClock | None,
        runway: Runway | None,
        quiet: Callable[[list[str]], None],
    ):
        self.clock = clock
        self.runway = runway
        self._quiet = quiet
        #: The run's clock learns durations; without one, this does (a listener).
        self.durations = clock.durations if clock is not None else Durations()
        #: Added to a job's expected duration: the worker jobs' margin when they set the
        #: runway, else the run's.
        self.safety = runway.safety if runway is not None else _clock_safety(clock)
        self._explained: set[str] = set()
        #: Jobs refused because no worker job could ever hold them.
        self.too_long = 0

    @classmethod
    def for_run(
        cls,
        clock: AllocationClock | None,
        runway: Runway | None,
        quiet: Callable[[list[str]], None],
    ) -> Placement | None:
        """None when no worker of the run has a known time limit: then nothing is checked
        (the run's clock, if any, can still land it on SIGUSR1)."""
        if runway is None and (clock is None or clock.watch.end is None):
            return None
        return cls(clock, runway, quiet)

    # -- Snakemake's scheduling thread, every job ------------------------------------------

    def check(self, job: Any, key: str) -> tuple[str | None, float | None]:
        """``(why it may not start, or None; its expected duration)``."""
        clock = self.clock
        if clock is not None and clock.watch.end is not None:
            why, seconds = clock.check(job, key)
            if why is not None:
                return why, seconds
            expected = None
        else:
            expected = expected_duration(job.name, job.resources, self.durations)
            seconds = expected.seconds
        runway = self.runway
        if (
            runway is None
            or runway.fresh is None
            or seconds is None
            or seconds + runway.safety <= runway.fresh
        ):
            return None, seconds
        if expected is None:
            expected = expected_duration(job.name, job.resources, self.durations)
        return self._refuse(job, key, expected), seconds

    def _refuse(self, job: Any, key: str, expected: Expected) -> str:
        assert self.runway is not None
        if job.name in self._explained:
            self._quiet([key])
        self._explained.add(job.name)
        self.too_long += 1
        return worker_job_refusal(job_label(job), expected, self.runway.safety, self.runway)

    def needs(self, expected: float | None) -> float | None:
        """What a job expected to take ``expected`` seconds needs before a worker's landing
        point (None: unknown, it may start until the landing point)."""
        return None if expected is None else expected + self.safety

    def runway_name(self, expected: float | None, now: float) -> str | None:
        """The runway point a job asks for (None: the run places by no runway)."""
        runway = self.runway
        if runway is None:
            return None
        return runway_request((expected or 0.0) + runway.safety, now, runway.step)

    # -- a job handed over again (status or recovery thread) --------------------------------

    def again(self, record: JobRecord) -> str | None:
        """Before ``record`` is handed over again: its runway point and its task's needs
        from now, or why it can no longer go anywhere (the message to fail it with)."""
        now = time.time()
        expected = record.expected
        source = (
            "half again what it ran before a worker job's limit stopped it"
            if record.stopped_at_limit
            else "what it is expected to take"
        )
        end = self.clock.watch.end if self.clock is not None else None
        if end is not None and not fits(expected, now, end.landing_at, end.safety):
            assert self.clock is not None
            return self.clock.refusal(record.job, record.key, Expected(expected, source), now, end)
        runway = self.runway
        if (
            runway is not None
            and runway.fresh is not None
            and expected is not None
            and expected + runway.safety > runway.fresh
        ):
            return self._refuse(record.job, record.key, Expected(expected, source))
        request = {name: amount for name, amount in record.request.items() if not is_runway(name)}
        name = self.runway_name(expected, now)
        if name is not None:
            request[name] = 1.0
        record.request = request
        record.spec = dataclasses.replace(record.spec, needs=self.needs(expected))
        return None

    # -- a listener of the run's jobs --------------------------------------------------------

    def ended(self, record: JobRecord, finished: Finished) -> None:
        """Without the run's clock, what a job that succeeded took is learned here."""
        if self.clock is None and finished.ok and finished.seconds is not None:
            self.durations.add(record.job.name, finished.seconds)


def _clock_safety(clock: AllocationClock | None) -> float:
    end = clock.watch.end if clock is not None else None
    return end.safety if end is not None else 0.0

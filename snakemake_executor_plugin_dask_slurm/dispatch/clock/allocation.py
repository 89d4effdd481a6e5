"""The thread that watches the allocation's clock: it wakes at the landing point, at the
hard stop, to ask SLURM again how long is left, and at once on SIGUSR1; what to do then is
the executor's (``land`` and ``hard_stop`` callbacks), the decisions are
:mod:`.policy`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...report.messages import job_label
from ...slurm.run import optional_command, scontrol_time_left
from ...slurm.walltime import allocation_end
from ..listeners import JobListener
from ..outcomes import Finished
from ..registry import JobRecord, JobRegistry, counts_by_rule
from .policy import (
    AllocationEnd,
    Durations,
    Expected,
    Running,
    clock_line,
    duration_text,
    expected_duration,
    fits,
    landing_line,
    refusal_message,
    scaled_margins,
    to_stop_at_landing,
)

#: Seconds between two questions to SLURM about the time left (a changed time limit).
REFRESH_SECONDS = 300.0
#: Seconds to wait for scontrol's answer about the time left.
SCONTROL_TIMEOUT = 10.0

logger = logging.getLogger(__name__)


class LandingWatch:
    """Calls ``land(why)`` once, at the landing point or on :meth:`request`, then
    ``hard_stop(why)`` once, at the hard stop."""

    def __init__(
        self,
        end: AllocationEnd | None,
        refresh: Callable[[], float | None] | None,
        land: Callable[[str], None],
        hard_stop: Callable[[str], None],
        margin: float,
    ):
        #: The allocation's end as known now (scontrol refreshes it).
        self.end = end
        self._refresh = refresh
        self._land = land
        self._hard_stop = hard_stop
        self._margin = margin
        self._event = threading.Event()
        self._requested: str | None = None
        self._closed = False
        self.landed_for: str | None = None
        self._hard_stop_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="dask-slurm-walltime", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, why: str) -> None:
        """Land now (a signal handler may call this: it only sets an event)."""
        self._requested = self._requested or why
        self._event.set()

    def close(self) -> None:
        self._closed = True
        self._event.set()

    def _run(self) -> None:
        next_refresh = time.time() + REFRESH_SECONDS
        while not self._closed:
            now = time.time()
            clock = self.end
            if self.landed_for is None:
                why = self._requested
                if why is None and clock is not None and now >= clock.landing_at:
                    why = "the allocation's time limit is near"
                if why is not None:
                    self.landed_for = why
                    self._hard_stop_at = clock.hard_stop if clock else now + self._margin / 2
                    self._call(self._land, why)
            if self._hard_stop_at is not None and now >= self._hard_stop_at:
                self._call(self._hard_stop, self.landed_for or "")
                return
            if self._refresh is not None and clock is not None and now >= next_refresh:
                next_refresh = now + REFRESH_SECONDS
                left = self._refresh()
                if left is not None:
                    self.end = dataclasses.replace(clock, end=now + left)
            wakes = [next_refresh]
            if self._hard_stop_at is not None:
                wakes.append(self._hard_stop_at)
            elif self.end is not None:
                wakes.append(self.end.landing_at)
            self._event.wait(max(0.05, min(wakes) - time.time()))
            self._event.clear()

    @staticmethod
    def _call(action: Callable[[str], None], why: str) -> None:
        try:
            action(why)
        except Exception:  # the watch must go on to the hard stop
            logger.exception("dask-slurm: landing step failed")


@dataclass(frozen=True)
class RunControls:
    """What the landing does to the run: stop jobs (each is then reported failed), take
    back jobs that have not started (the keys that had, with when), make Snakemake schedule
    nothing more and end once its running jobs are reported."""

    stop_jobs: Callable[[list[str]], set[str] | None]
    exit_gracefully: Callable[[], None]
    withdraw: Callable[[list[str]], dict[str, float] | None] = lambda keys: None


class AllocationClock(JobListener):
    """Everything of the allocation's clock the executor uses: the check of each job
    (on Snakemake's scheduling thread), what succeeded jobs took, and the landing.

    ``stop_jobs`` kills jobs (each is then reported failed); ``exit_gracefully`` makes
    Snakemake schedule nothing more and end once its running jobs are reported;
    ``warn`` logs one line.
    """

    def __init__(
        self,
        clock: AllocationEnd | None,
        margin: float,
        refresh: Callable[[], float | None] | None,
        registry: JobRegistry,
        controls: RunControls,
        warn: Callable[[str], None],
    ):
        self.durations = Durations()
        self._stop_jobs = controls.stop_jobs
        self._exit_gracefully = controls.exit_gracefully
        self._withdraw = controls.withdraw
        self._registry = registry
        self._warn = warn
        self._explained: set[str] = set()
        self.succeeded = 0
        self.stopped = 0
        self.refused_at_landing = 0
        #: Jobs handed over but not started when the run landed: withdrawn.
        self.withdrawn = 0
        #: Jobs not started because they could not finish in the time left.
        self.too_long = 0
        self.watch = LandingWatch(clock, refresh, self._land, self._hard_stop, margin)

    @classmethod
    def for_run(
        cls,
        env: Mapping[str, str],
        margins: tuple[float, float],
        registry: JobRegistry,
        controls: RunControls,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        known: AllocationEnd | None = None,
    ) -> AllocationClock | None:
        """Inside an allocation: its end (one question to SLURM, unless ``known``: as the
        run's workers were told it), and the landing thread, started; None outside SLURM
        or with a landing margin of 0. ``margins`` are --dask-slurm-landing-margin and
        --dask-slurm-runtime-margin."""
        job_id = env.get("SLURM_JOB_ID")
        landing, runtime = margins
        if not job_id or landing <= 0:
            return None
        scontrol = optional_command("scontrol")

        def time_left() -> float | None:
            return scontrol_time_left(scontrol, job_id, SCONTROL_TIMEOUT) if scontrol else None

        now = time.time()
        end = known
        if end is None:
            found = allocation_end(env, time_left(), now)
            if found is not None:
                margin, safety = scaled_margins(found[0], now, landing, runtime)
                end = AllocationEnd(found[0], margin, safety, found[1])
        say(clock_line(job_id, end, now, landing))
        margin = end.margin if end is not None else landing
        clock = cls(end, margin, time_left if scontrol else None, registry, controls, warn)
        clock.start()
        return clock

    # -- the landing thread's controls -----------------------------------------------

    def start(self) -> None:
        self.watch.start()

    def request(self, why: str) -> None:
        """Land now (a signal handler may call this: it only sets an event)."""
        self.watch.request(why)

    @property
    def landed_for(self) -> str | None:
        """Why the run landed, once it did."""
        return self.watch.landed_for

    def close(self) -> None:
        self.watch.close()

    # -- Snakemake's scheduling thread, every job ----------------------------------------

    def check(self, job: Any, key: str) -> tuple[str | None, float | None]:
        """``(why it may not start, or None; its expected duration)``; a rule's second and
        later refusals are quiet (its first said why)."""
        clock = self.watch.end
        if clock is None:
            return None, None
        expected = expected_duration(job.name, job.resources, self.durations)
        now = time.time()
        if fits(expected.seconds, now, clock.landing_at, clock.safety):
            return None, expected.seconds
        return self.refusal(job, key, expected, now, clock), expected.seconds

    def refusal(
        self, job: Any, key: str, expected: Expected, now: float, clock: AllocationEnd
    ) -> str:
        """Why ``job`` is not started: it cannot finish before the landing point (a rule's
        second and later refusals are quiet)."""
        if job.name in self._explained:
            self._registry.quiet([key])
        self._explained.add(job.name)
        self.too_long += 1
        return refusal_message(job_label(job), expected, now, clock)

    # -- a listener of the run's jobs (..listeners.JobListener) -------------------------

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        return None

    def refused(self, keys: Sequence[str]) -> None:
        """Jobs Snakemake handed over after the landing began: quiet, counted."""
        if self.watch.landed_for is None:
            return
        self._registry.quiet(keys)
        self.refused_at_landing += len(keys)

    def ended(self, record: JobRecord, finished: Finished) -> None:
        """What a job that succeeded took, for its rule's expected duration."""
        if finished.ok:
            self.succeeded += 1
            if finished.seconds is not None:
                self.durations.add(record.job.name, finished.seconds)

    # -- the landing thread ----------------------------------------------------------

    def _land(self, why: str) -> None:
        """No job starts any more: what was handed over but has not started is withdrawn
        at once (it goes back to Snakemake, quietly, as not run); of the started jobs,
        those expected to end before the hard stop go on, the others are stopped now. The
        run ends as soon as the started jobs that go on are done."""
        clock, now = self.watch.end, time.time()
        ends = f"; the allocation ends in {duration_text(clock.end - now)}" if clock else ""
        landing = "landing before the allocation's time limit" if clock else "landing"
        keys = self._registry.begin_stop(f"the run is {landing} ({why}{ends})")
        self._registry.quiet(keys)  # the landing's lines say what became of them
        started = self._withdraw(keys)
        if started is None:  # the workers could not be asked: every job may have started
            started = {key: 0.0 for key in keys}
        running = [
            Running(key, started[key] or record.handed_over, self._expected(record))
            for record in self._registry.records(list(started))
            if (key := record.key)
        ]
        # Without a known end (SIGUSR1 only), nothing is known to finish in time.
        stop = to_stop_at_landing(running, clock) if clock else [job.key for job in running]
        self.stopped += len(stop)
        waiting = len(keys) - len(started)
        self.withdrawn += waiting
        rules = counts_by_rule([record.job for record in self._registry.records(stop)])
        self._warn(landing_line(why + ends, len(running) - len(stop), len(stop), rules, waiting))
        self._exit_gracefully()
        self._stop_jobs(stop)

    def _expected(self, record: JobRecord) -> float | None:
        """How long ``record``'s job is expected to take: as when it was handed over, else
        what its rule's jobs have taken since (it was handed over before that was known)."""
        if record.expected is not None:
            return record.expected
        learned = self.durations.estimate(record.job.name)
        return learned[0] if learned is not None else None

    def _hard_stop(self, why: str) -> None:
        keys = self._registry.keys()
        if not keys:
            return
        self._registry.quiet(keys)
        self.stopped += len(keys)
        self._warn(f"stopping the {len(keys)} job(s) still running, to end before SLURM does")
        self._stop_jobs(keys)

    def run_ended(self, command: str) -> None:
        line = self.summary(command)
        if line:
            self._warn(line)

    def summary(self, command: str) -> str | None:
        """The closing line of a run the clock cut short (None if it did not)."""
        if self.watch.landed_for is None and not self.too_long:
            return None
        parts = [f"{self.succeeded} job(s) finished in this allocation"]
        if self.stopped:
            parts.append(f"{self.stopped} started job(s) stopped (their outputs removed)")
        if self.withdrawn + self.refused_at_landing:
            parts.append(f"{self.withdrawn + self.refused_at_landing} never started")
        if self.too_long:
            parts.append(f"{self.too_long} not started (they could not finish in time)")
        if self.watch.landed_for is None:
            how = "ran up to the allocation's time limit"
        elif self.watch.end is None:
            how = f"landed ({self.watch.landed_for})"
        else:
            how = "landed before the allocation's time limit"
        return (
            f"the run {how}: {', '.join(parts)}. In a new allocation the same command "
            "continues from here (Snakemake redoes only what is missing; no --unlock or "
            f"--rerun-incomplete needed): {command}"
        )

"""Every route of a task's end carried out (:func:`...dispatch.routing.route`'s ten), with
the real :class:`Settler`, :class:`Failures` (its cluster side), :class:`Again`, dispatcher
and registry over an in-process Dask and a fake cluster source: what Snakemake is told for
each. A rerun or a move goes to Dask for real as its new task (``-rN``, ``-mN``), whose
success is then told. A second or two."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.clusters.base import ClusterSource, Growth
from snakemake_executor_plugin_dask_slurm.clusters.security import PlainTcp
from snakemake_executor_plugin_dask_slurm.dispatch import ends as ends_module
from snakemake_executor_plugin_dask_slurm.dispatch.again import Again, Snakemake
from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import Dispatcher
from snakemake_executor_plugin_dask_slurm.dispatch.ends import Settler
from snakemake_executor_plugin_dask_slurm.dispatch.listeners import JobListener, Listeners
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord, JobRegistry
from snakemake_executor_plugin_dask_slurm.dispatch.routing import Route
from snakemake_executor_plugin_dask_slurm.executor.failures import Failures, Say
from snakemake_executor_plugin_dask_slurm.worker.supervisor import Swept
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskOutcome, TaskSpec
from tests.fakes import FakeJob
from tests.waiting import eventually

pytestmark = pytest.mark.component

KEY = "thin-1-a1-t"
BROKEN = "the scheduler is gone"
ALLOCATION_ENDED = "SLURM job 12 ended: TIMEOUT"


@dataclass
class Job(FakeJob):
    """A job whose outputs can be removed before it runs again (the general way: its own
    Snakemake prepares them)."""

    removed: int = 0

    async def remove_existing_output(self) -> None:
        self.removed += 1


class FakeGrowth(Growth):
    """Worker jobs' workers are named ``j<id>-<node>``; ``ending``: SLURM says theirs ends."""

    def __init__(self, ending: bool):
        self.ending = ending

    def future_offers(self) -> list[dict[str, float]]:
        return []

    def workers_may_come(self) -> bool:
        return False

    def from_worker_job(self, worker: str) -> bool:
        return worker.startswith("j")

    def lost_with_its_job(self, worker: str, noticed: float) -> bool:
        return self.ending


class FakeSource(ClusterSource):
    """What the failure handling asks a source, answered from fields; nothing starts."""

    def __init__(self) -> None:
        self.security = PlainTcp()
        self.broken: str | None = None
        self.allocation_ended: str | None = None
        #: The run's failure waits here (stopping the workers) until it is set.
        self.workers_stopped = threading.Event()
        self.workers_stopped.set()
        self.swept: list[tuple[str, list[str]]] = []
        #: Whether a sweep finds the jobs' processes (they were running when it looked).
        self.sweep_finds_them = True

    def start(self) -> Client:
        raise AssertionError("not started here")

    def close(self) -> None:
        pass

    def problem(self) -> str | None:
        return self.broken

    def allocation_problem(self) -> str | None:
        return self.allocation_ended

    def stop_workers(self) -> None:
        self.workers_stopped.wait(10)

    def sweep(self, worker: str, keys: Sequence[str]) -> Swept | None:
        self.swept.append((worker, list(keys)))
        return Swept("swept its node", tuple(keys) if self.sweep_finds_them else ())


class Told:
    """Snakemake's side: what it was told, in order, and how it runs a coroutine."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def succeeded(self, info: SubmittedJobInfo) -> None:
        self.lines.append(("succeeded", info.external_jobid or "", ""))

    def failed(self, info: SubmittedJobInfo, msg: str = "", aux_logs: Any = None) -> None:
        self.lines.append(("failed", info.external_jobid or "", msg))

    def snakemake(self) -> Snakemake:
        return Snakemake(self.succeeded, self.failed, asyncio.run, self.submitted)

    def submitted(self, info: SubmittedJobInfo, register_job: bool = True) -> None:
        pass  # the jobs here are registered by hand (Run.register)


class Heard(JobListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        self.events += [("handed over", record.key) for record in records]

    def moved(self, old_key: str, record: JobRecord) -> None:
        self.events.append(("moved", f"{old_key} -> {record.key}"))

    def ended(self, record: JobRecord, finished: Finished) -> None:
        self.events.append(("ended", finished.key))


@dataclass
class Run:
    """One run's failure handling around a fake source, fed as Snakemake's status thread
    would feed it; the routes it took."""

    source: FakeSource
    registry: JobRegistry
    dispatcher: Dispatcher
    failures: Failures
    settler: Settler
    told: Told
    heard: Heard
    said: list[str]
    routes: list[Route] = field(default_factory=list)
    record: JobRecord | None = None

    def register(self, tmp_path: Path) -> JobRecord:
        """The job ``KEY`` as handed over (its first task never reaches Dask: each test says
        how it ended)."""
        spec = TaskSpec(KEY, ("true",), str(tmp_path), (), str(tmp_path / f"{KEY}.log"), None)
        record = JobRecord(SubmittedJobInfo(Job(), external_jobid=KEY), spec, {"cpus": 1}, "cold")
        self.registry.hand_over([record], lambda info: None, lambda tasks: None)
        self.record = record
        return record

    def end(self, finished: Finished) -> None:
        self.settler.settle(finished)

    def until_told(self, count: int) -> list[tuple[str, str, str]]:
        """Snakemake's status loop: what the dispatcher drained is settled, until
        Snakemake was told ``count`` things."""

        def enough() -> bool:
            self.settler.settle_finished()
            return len(self.told.lines) >= count

        eventually(f"Snakemake told {count} thing(s)", enough, 10, interval=0.01)
        return self.told.lines


@pytest.fixture
def run(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    source, registry, told, heard = FakeSource(), JobRegistry(), Told(), Heard()
    said: list[str] = []
    listeners = Listeners([heard])
    dispatcher = Dispatcher(client, lambda: None, listeners=listeners)
    say = Say(said.append, lambda line: said.append(f"warning: {line}"), said.append)
    again = Again(registry, dispatcher, told.snakemake(), listeners)
    failures = Failures(registry, source, dispatcher, again, 10.0, say, "detail.log")
    settler = Settler(registry, dispatcher, listeners, again, failures)
    handle = Run(source, registry, dispatcher, failures, settler, told, heard, said)
    real_route = ends_module.route

    def route(finished: Finished, state: Any) -> Route:
        handle.routes.append(real_route(finished, state))
        return handle.routes[-1]

    monkeypatch.setattr(ends_module, "route", route)
    yield handle
    source.workers_stopped.set()
    failures.close()


def outcome(returncode: int) -> TaskOutcome:
    return TaskOutcome(returncode, "n1", 100.0, 102.5, "oops")


def failed_message(tmp_path: Path, what: str) -> str:
    return (
        f"rule thin (jobid 1, attempt 1) {what} on n1 after 2.5 s (run the general way). "
        f"Last lines of its output:\n  | oops\n    Full log: {tmp_path / KEY}.log\n"
    )


def test_forgotten_nothing_is_told(run: Run) -> None:
    run.end(Finished("gone-1", False, outcome=outcome(1)))
    assert run.routes == [Route.FORGOTTEN] and run.told.lines == []


def test_succeeded_is_told_and_unregistered(run: Run, tmp_path: Path) -> None:
    run.register(tmp_path)
    run.end(Finished(KEY, True, seconds=1.0))
    assert run.routes == [Route.SUCCEEDED]
    assert run.told.lines == [("succeeded", KEY, "")] and run.registry.keys() == []
    assert run.heard.events == [("ended", KEY)]


def test_failed_is_told_with_its_message_and_log(run: Run, tmp_path: Path) -> None:
    run.register(tmp_path)
    run.end(Finished(KEY, False, outcome=outcome(3), on=WorkerRef("n1", 4)))
    assert run.routes == [Route.FAILED]
    assert run.told.lines == [("failed", KEY, failed_message(tmp_path, "exited with code 3"))]
    assert run.registry.keys() == []
    assert (tmp_path / f"{KEY}.log").exists()  # the message names it: there, if empty


def test_a_move_goes_to_dask_again_and_its_success_is_told(run: Run, tmp_path: Path) -> None:
    run.register(tmp_path)
    run.end(Finished(KEY, False, problem="not started: no time left there", too_late=True))
    assert run.routes == [Route.MOVE]
    assert run.until_told(1) == [("succeeded", KEY, "")]
    assert run.routes == [Route.MOVE, Route.SUCCEEDED]
    moved = ("moved", f"{KEY} -> {KEY}-m1")
    assert run.heard.events == [("ended", KEY), moved, ("ended", f"{KEY}-m1")]
    assert run.record is not None and (run.record.moves, run.record.reruns) == (1, 0)
    assert run.record.job.removed == 0  # nothing ran: nothing removed


def test_a_job_stopped_at_its_worker_jobs_landing_runs_again(run: Run, tmp_path: Path) -> None:
    record = run.register(tmp_path)
    record.stopped_at_limit = KEY
    run.end(Finished(KEY, False, outcome=outcome(-15), on=WorkerRef("j12-n1", 4)))
    assert run.until_told(1) == [("succeeded", KEY, "")]
    assert run.routes == [Route.RERUN, Route.SUCCEEDED]
    assert (record.reruns, record.job.removed, record.log) == (1, 1, f"{tmp_path / KEY}.rerun1.log")
    assert run.heard.events == [
        ("ended", KEY),
        ("handed over", f"{KEY}-r1"),
        ("ended", f"{KEY}-r1"),
    ]


def test_a_job_lost_with_its_worker_runs_again_once_its_processes_are_gone(
    run: Run, tmp_path: Path
) -> None:
    record = run.register(tmp_path)
    lost = WorkerRef("n2", 7)
    run.end(Finished(KEY, False, problem="its Dask worker n2 died", lost_on=lost))
    assert run.until_told(1) == [("succeeded", KEY, "")]
    assert run.routes == [Route.LOST, Route.SUCCEEDED]
    assert run.source.swept == [("n2", [KEY])]  # no supervisor's record: swept
    assert (record.reruns, record.lost_on, record.job.removed) == (1, ["n2"], 1)
    assert run.said == [
        "warning: worker n2 is gone; swept its node: 1 running job(s) run again elsewhere "
        "(each job: detail.log)"
    ]


@pytest.mark.parametrize("ending", [True, False], ids=["its job ended", "it did not"])
def test_a_failure_on_a_worker_jobs_worker_asks_whether_that_job_ended(
    run: Run, tmp_path: Path, ending: bool
) -> None:
    run.source.growth = FakeGrowth(ending)
    run.source.sweep_finds_them = False  # SLURM's signal ended them before anyone looked
    record = run.register(tmp_path)
    run.end(Finished(KEY, False, outcome=outcome(-15), on=WorkerRef("j12-n1", 4)))
    if ending:  # killed with its worker job: lost, then run again
        assert run.until_told(1) == [("succeeded", KEY, "")]
        assert run.routes == [Route.ASK_WORKER_JOB, Route.SUCCEEDED]
        assert run.said[0] == (
            f"job {KEY} failed as its worker job ended under it: it runs again elsewhere "
            "once its processes are gone"
        )
        assert (record.reruns, run.source.swept) == (1, [("j12-n1", [KEY])])
        # Its failure says it ran there: told as running, and a loss counted against it.
        assert record.lost_on == ["j12-n1"]
        assert "1 running job(s) run again elsewhere" in run.said[1], run.said
    else:
        told = run.until_told(1)
        assert told == [("failed", KEY, failed_message(tmp_path, "was killed by signal SIGTERM"))]
        assert run.routes == [Route.ASK_WORKER_JOB]


@pytest.mark.parametrize("broken", [False, True], ids=["cluster fine", "cluster broken"])
def test_no_outcome_checks_the_cluster(run: Run, tmp_path: Path, broken: bool) -> None:
    run.register(tmp_path)
    run.source.broken = BROKEN if broken else None
    run.end(Finished(KEY, False, problem="its Dask task was cancelled"))
    assert run.routes == [Route.CHECK_CLUSTER]
    if broken:  # the run's failure tells it, with every other job
        assert run.until_told(1) == [("failed", KEY, f"stopped: the Dask cluster broke: {BROKEN}")]
        assert run.registry.fatal == f"the Dask cluster broke: {BROKEN}"
    else:
        assert run.told.lines == [
            (
                "failed",
                KEY,
                "rule thin (jobid 1, attempt 1) did not finish: its Dask task was cancelled. "
                f"Log: {tmp_path / KEY}.log\n",
            )
        ]


@pytest.mark.parametrize("ended", [False, True], ids=["allocation on", "allocation ended"])
def test_a_signal_the_plugin_did_not_send_asks_whether_the_allocation_ended(
    run: Run, tmp_path: Path, ended: bool
) -> None:
    run.register(tmp_path)
    run.source.allocation_ended = ALLOCATION_ENDED if ended else None
    run.end(Finished(KEY, False, outcome=outcome(-9), on=WorkerRef("n1", 4)))
    told = run.until_told(1)
    assert run.routes == [Route.ASK_ALLOCATION]
    if ended:
        assert told == [("failed", KEY, f"stopped: the Dask cluster broke: {ALLOCATION_ENDED}")]
    else:
        assert told == [("failed", KEY, failed_message(tmp_path, "was killed by signal SIGKILL"))]


def test_covered_by_the_runs_failure_is_told_once_with_every_other_job(
    run: Run, tmp_path: Path
) -> None:
    run.register(tmp_path)
    run.source.workers_stopped.clear()  # the run's failure waits for its workers to stop
    run.source.broken = BROKEN
    run.failures.check_cluster(force=True)
    run.end(Finished(KEY, False, outcome=outcome(1), on=WorkerRef("n1", 4)))
    assert run.routes == [Route.COVERED] and run.told.lines == []
    run.source.workers_stopped.set()
    assert run.until_told(1) == [("failed", KEY, f"stopped: the Dask cluster broke: {BROKEN}")]

"""A chunk of jobs handed over in one call (:meth:`...dispatch.ends.Submitter.submit`): what
Snakemake is told, in order, and what the listeners hear, when the intake refuses a job,
when Dask refuses one, and when the run stops. Fakes for the intake and the dispatcher; the
real registry, listeners and :class:`...dispatch.again.Again`. (The settling of every
route: tests/component/test_failures.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.again import Again, Snakemake
from snakemake_executor_plugin_dask_slurm.dispatch.ends import Submitter
from snakemake_executor_plugin_dask_slurm.dispatch.listeners import JobListener, Listeners
from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import SubmitFailed
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord, JobRegistry, Refusal
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.fakes import FakeJob


def record(jobid: int) -> JobRecord:
    key = f"thin-{jobid}-a1-t"
    spec = TaskSpec(key, ("true",), "/tmp", (), f"/tmp/{key}.log", None)
    info = SubmittedJobInfo(FakeJob(jobid=jobid), external_jobid=key)
    return JobRecord(info, spec, {"cpus": 1.0}, "direct")


class Intake:
    """Takes what it was given: of these records and refusals, those of the chunk's jobs."""

    def __init__(self, records: list[JobRecord], refused: list[Refusal]) -> None:
        self.records, self.refused = records, refused

    def take(self, jobs: Sequence[Any]) -> tuple[list[JobRecord], list[Refusal]]:
        ids = {id(job) for job in jobs}
        return (
            [r for r in self.records if id(r.job) in ids],
            [(info, msg) for info, msg in self.refused if id(info.job) in ids],
        )


class Dispatcher:
    """Dask takes every task but those of ``refuses``."""

    def __init__(self, refuses: Sequence[str] = ()) -> None:
        self.refuses = list(refuses)
        self.submitted: list[str] = []

    def submit_many(self, tasks: Sequence[tuple[TaskSpec, Any]]) -> None:
        self.submitted += [spec.key for spec, _ in tasks if spec.key not in self.refuses]
        if self.refuses:
            raise SubmitFailed(self.refuses, ConnectionError("scheduler gone"))


class Told:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str | None, str]] = []

    def snakemake(self) -> Snakemake:
        return Snakemake(lambda info: None, self.failed, lambda coroutine: None, self.submitted)

    def submitted(self, info: SubmittedJobInfo, register_job: bool = True) -> None:
        what = "submitted" if register_job else "submitted, not registered"
        self.lines.append((what, info.external_jobid, ""))

    def failed(self, info: SubmittedJobInfo, msg: str = "", aux_logs: Any = None) -> None:
        self.lines.append(("failed", info.external_jobid, msg))


class Heard(JobListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[str]]] = []

    def handed_over(self, records: Sequence[JobRecord]) -> None:
        self.events.append(("handed over", [r.key for r in records]))

    def refused(self, keys: Sequence[str]) -> None:
        self.events.append(("refused", list(keys)))


def submitter(
    records: list[JobRecord], refused: list[Refusal], dispatcher: Dispatcher
) -> tuple[Submitter, JobRegistry, Told, Heard]:
    registry, told, heard = JobRegistry(logs="/logs"), Told(), Heard()
    listeners = Listeners([heard])
    again = Again(registry, dispatcher, told.snakemake(), listeners)  # type: ignore[arg-type]
    intake = Intake(records, refused)
    handing = Submitter(intake, registry, dispatcher, listeners, again)  # type: ignore[arg-type]
    return handing, registry, told, heard


def test_a_chunk_is_announced_handed_over_and_its_refusals_told_after() -> None:
    one, two, three = record(1), record(2), record(3)
    refusal = (two.info, "rule thin (jobid 2, attempt 1) could not be prepared: no\n")
    dispatcher = Dispatcher(refuses=[three.key])
    handing, registry, told, heard = submitter([one, three], [refusal], dispatcher)
    handing.submit([one.job, two.job, three.job])
    assert dispatcher.submitted == [one.key]
    assert registry.keys() == [one.key]
    lost = told.lines[4]
    assert told.lines[:4] == [
        ("submitted", one.key, ""),
        ("submitted", three.key, ""),
        ("submitted, not registered", two.key, ""),
        ("failed", two.key, refusal[1]),
    ]
    assert lost[:2] == ("failed", three.key) and "could not be handed to the Dask" in lost[2]
    assert "/logs" in lost[2] and len(told.lines) == 5
    assert heard.events == [("refused", []), ("handed over", [one.key])]


def test_a_stopping_run_refuses_the_chunk_and_tells_the_listeners() -> None:
    one, two = record(1), record(2)
    dispatcher = Dispatcher()
    handing, registry, told, heard = submitter([one, two], [], dispatcher)
    registry.begin_stop("Snakemake received SIGTERM")
    handing.submit([one.job, two.job])
    assert dispatcher.submitted == [] and registry.keys() == []
    not_started = "rule thin (jobid {}, attempt 1) was not started: Snakemake received SIGTERM\n"
    assert told.lines == [
        ("submitted, not registered", one.key, ""),
        ("failed", one.key, not_started.format(1)),
        ("submitted, not registered", two.key, ""),
        ("failed", two.key, not_started.format(2)),
    ]
    assert heard.events == [("refused", [one.key, two.key]), ("handed over", [])]


def test_a_round_goes_in_chunks_each_job_announced_first() -> None:
    records = [record(i) for i in range(3)]
    handing, registry, told, heard = submitter(records, [], Dispatcher())
    announced: list[Any] = []
    handing.submit_round([r.job for r in records], announced.append)
    assert announced == [r.job for r in records]
    assert registry.keys() == [r.key for r in records]
    assert told.lines == [("submitted", r.key, "") for r in records]
    handed = [key for what, keys in heard.events if what == "handed over" for key in keys]
    assert handed == [r.key for r in records]

"""The job registry: hand-over to Dask (and what happens when Dask refuses), stops that
never miss a job, reruns under a new key. Against a real in-process Dask client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import Dispatcher, SubmitFailed
from snakemake_executor_plugin_dask_slurm.dispatch.registry import (
    HandedOver,
    JobRecord,
    JobRegistry,
    NotRerun,
    NotTaken,
    counts_by_rule,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec
from tests.component.conftest import in_process_dask
from tests.fakes import FakeJob

pytestmark = pytest.mark.component


def job(jobid: int, rule: str = "thin") -> Any:
    return FakeJob(name=rule, jobid=jobid)


def entry(tmp_path: Path, jobid: int, cpus: int) -> JobRecord:
    key = f"thin-{jobid}"
    spec = TaskSpec(key, ("true",), str(tmp_path), (), str(tmp_path / f"{key}.log"), None)
    info = SubmittedJobInfo(job(jobid), external_jobid=key)
    return JobRecord(info, spec, {"cpus": cpus}, "direct")


def test_jobs_dask_refuses_are_unregistered_and_failed_with_a_reason(tmp_path: Path) -> None:
    with in_process_dask(threads=1) as (_, client):
        dispatcher = Dispatcher(client, lambda: None)
        client.close()  # what a client that lost its scheduler refuses with
    registry = JobRegistry(logs=str(tmp_path / "logs"))
    announced: list[str] = []
    refused, lost = registry.hand_over(
        [entry(tmp_path, 1, 1), entry(tmp_path, 2, 2)],
        lambda info: announced.append(info.external_jobid),
        dispatcher.submit_many,
    )
    assert refused == [] and announced == ["thin-1", "thin-2"]
    assert [info.external_jobid for info, _ in lost] == ["thin-1", "thin-2"]
    assert registry.keys() == []
    msg = lost[0][1]
    assert msg.startswith("rule thin (jobid 1, attempt 1) could not be handed to the Dask ")
    assert "(ClosedClientError: " in msg and f"see its log in {tmp_path / 'logs'}" in msg


def test_a_stop_refuses_every_later_job_and_snapshots_the_earlier_ones(tmp_path: Path) -> None:
    registry = JobRegistry()
    submitted: list[list[Any]] = []
    registry.hand_over([entry(tmp_path, 1, 1)], lambda info: None, submitted.append)
    assert registry.begin_stop("SIGTERM") == ["thin-1"]
    refused, lost = registry.hand_over([entry(tmp_path, 2, 1)], lambda info: None, submitted.append)
    assert [(i.external_jobid, m) for i, m in refused] == [
        ("thin-2", "rule thin (jobid 2, attempt 1) was not started: SIGTERM\n")
    ]
    assert lost == [] and len(submitted) == 1 and registry.keys() == ["thin-1"]
    assert registry.begin_fatal("broke") and not registry.begin_fatal("again")
    assert registry.stop_reason == "SIGTERM"  # the first reason stays


def test_take_all_forgets_every_job_and_can_silence_their_failures(tmp_path: Path) -> None:
    registry = JobRegistry()
    registry.hand_over([entry(tmp_path, i, 1) for i in (1, 2)], lambda info: None, lambda t: None)
    taken = registry.take_all("cluster broke", quiet=True)
    assert list(taken) == ["thin-1", "thin-2"] and registry.keys() == []
    assert registry.is_quiet("thin-1") and not registry.is_quiet("thin-3")
    # Their tasks still end (killed, cancelled): what ran is still told (usage report).
    assert registry.get("thin-1") is None and registry.taken("thin-1") is taken["thin-1"]
    assert registry.taken("thin-3") is None


def test_a_rerun_claims_the_job_then_registers_it_under_a_new_key(tmp_path: Path) -> None:
    registry = JobRegistry()
    record = entry(tmp_path, 1, 1)
    registry.hand_over([record], lambda i: None, lambda t: None)
    assert registry.claim_for_rerun("thin-1") is record
    assert registry.pop("thin-1") is None  # a late success of the lost copy finds it gone
    again = record.next_run()
    assert (again.key, again.log_path) == ("thin-1-r1", str(tmp_path / "thin-1.rerun1.log"))
    sent: list[Any] = []
    assert registry.resubmit(record, again, sent.append) == HandedOver()
    assert registry.keys() == ["thin-1-r1"] and sent == [[(again, {"cpus": 1})]]
    assert record.reruns == 1 and record.next_run().key == "thin-1-r2"


def test_no_rerun_once_the_run_stops(tmp_path: Path) -> None:
    registry = JobRegistry()
    record = entry(tmp_path, 1, 1)
    registry.hand_over([record], lambda i: None, lambda t: None)
    assert registry.claim_for_rerun("thin-1") is record
    registry.begin_stop("cancelled")  # between the claim and the resubmission
    assert registry.resubmit(record, record.next_run(), lambda t: None) == NotRerun("cancelled")
    assert registry.keys() == []  # the caller fails it
    registry2 = JobRegistry()
    registry2.hand_over([entry(tmp_path, 2, 1)], lambda i: None, lambda t: None)
    registry2.begin_stop("SIGTERM")
    assert registry2.claim_for_rerun("thin-2") is None
    assert registry2.keys() == ["thin-2"]  # still registered: the stop reports it


def test_a_claimed_job_dask_does_not_take_is_reported(tmp_path: Path) -> None:
    registry = JobRegistry()
    record = entry(tmp_path, 1, 1)
    registry.hand_over([record], lambda i: None, lambda t: None)

    def refuse(tasks: list[Any]) -> None:
        raise SubmitFailed([t[0].key for t in tasks], RuntimeError("gone"))

    assert registry.claim_for_rerun("thin-1") is record
    lost = registry.resubmit(record, record.next_run(), refuse)
    assert isinstance(lost, NotTaken) and lost.refusals[0][0] is record.info
    assert registry.keys() == []


def test_counts_by_rule() -> None:
    assert counts_by_rule([job(1, "b"), job(2, "a"), job(3, "b")]) == "rule a (1), rule b (2)"

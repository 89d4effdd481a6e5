"""The usage report's listener: the run's records and outcomes become the collector's
plain facts (and so its rows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.dispatch.registry import JobRecord
from snakemake_executor_plugin_dask_slurm.dispatch.usage_listener import (
    UsageListener,
    ended_from,
    previous_key,
    usage_listener,
)
from snakemake_executor_plugin_dask_slurm.report.usage import Ended, UsageCollector
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, TaskOutcome, TaskSpec, Usage, Why
from tests.fakes import FakeJob

USAGE = Usage("n1", "w1", "7", 10.0, 2.0, 1.5, 300 << 10, 70 << 10)


def record(key: str = "align-3-a1-t", reruns: int = 0, first: str = "") -> JobRecord:
    job = FakeJob("align", 3, 1, 8, {"mem_mb": 16000, "runtime": 30, "tmpdir": "<TBD>"})
    spec = TaskSpec(key, ("/bin/true",), "/wd", (), f"/logs/{key}.log", None)
    info = SubmittedJobInfo(job, external_jobid=key)  # type: ignore[arg-type]
    return JobRecord(info, spec, {"cpus": 8}, "direct", 100.0, reruns=reruns, first_key=first)


@pytest.mark.parametrize(
    ("finished", "stop", "ended"),
    [
        (Finished("k", True, seconds=2.0, usage=USAGE), "landing", Ended(True, USAGE)),
        (
            Finished("k", False, outcome=TaskOutcome(3, "n1", 1, 2, ""), usage=USAGE),
            "landing",  # failed by itself while the run stopped: not the stop's doing
            Ended(False, USAGE, returncode=3),
        ),
        (
            Finished("k", False, outcome=TaskOutcome(-15, "n1", 1, 2, ""), usage=USAGE),
            "landing",
            Ended(False, USAGE, returncode=-15, stop="landing"),
        ),
        (
            Finished("k", False, outcome=TaskOutcome(-1, "n1", 1, 1, "", "no bash")),
            None,
            Ended(False, returncode=-1, start_error="no bash"),
        ),
        (
            Finished("k", False, problem="its Dask worker w1 died", lost_on=WorkerRef("w1", 9)),
            "landing",
            Ended(False, problem="its Dask worker w1 died", lost_on="w1"),
        ),
        (
            Finished("k", False, problem="its Dask task was cancelled"),
            "Ctrl-C",
            Ended(False, problem="its Dask task was cancelled", stop="Ctrl-C"),
        ),
        (
            Finished("k", True, seconds=2.0, usage=USAGE, cold=Cold(Why.WARM_OFF)),
            None,
            Ended(True, USAGE, cold=True),
        ),
    ],
)
def test_ended_from_finished(finished: Finished, stop: str | None, ended: Ended) -> None:
    assert ended_from(finished, stop) == ended


def test_the_key_a_rerun_replaces() -> None:
    assert previous_key(record()) is None
    assert previous_key(record("k-r1", reruns=1, first="k")) == "k"
    assert previous_key(record("k-r2", reruns=2, first="k")) == "k-r1"


def test_the_listener_feeds_every_attempt_a_rerun_a_refusal_and_the_workers() -> None:
    collector = UsageCollector(clock=lambda: 500.0)
    stop: list[str] = []
    listener = UsageListener(collector, lambda: stop[0] if stop else None, slurm_job="7")
    listener.workers_seen(
        {"tls://a:1": {"name": "n1", "host": "10.0.0.1", "nthreads": 8, "resources": {"cpus": 8}}}
    )
    first = record("k")
    listener.handed_over([first])
    listener.ended(first, Finished("k", False, problem="died", lost_on=WorkerRef("n1", 3)))
    rerun = record("k-r1", reruns=1, first="k")
    listener.handed_over([rerun])
    listener.ended(rerun, Finished("k-r1", True, seconds=2.0, usage=USAGE))
    cut = record("cut")
    listener.handed_over([cut])
    stop.append("the run is landing")
    listener.ended(
        cut, Finished("cut", False, outcome=TaskOutcome(-15, "n1", 1, 2, ""), usage=USAGE)
    )
    rows = {a.key: a for a in collector.attempts()}
    assert (rows["k"].outcome, rows["k-r1"].outcome, rows["k-r1"].rerun) == ("lost", "done", 1)
    assert (rows["cut"].outcome, rows["cut"].detail) == ("stopped", "the run is landing")
    done = rows["k-r1"]
    assert (done.rule, done.jobid, done.threads, done.mem_mb, done.runtime_min) == (
        "align", 3, 8, 16000.0, 30.0,
    )  # fmt: skip
    # 300 MiB from the kernel is 314.6 MB, the unit of mem_mb
    assert (done.handed_over, done.max_rss_mb, done.worker) == (100.0, 314.5728, "w1")
    (span,) = [w for w in collector.workers() if w.name == "n1"]
    assert (span.host, span.cpus, span.slurm_job, span.joined) == (
        "10.0.0.1",
        8.0,
        "7",
        span.joined,
    )
    listener.worker_left("n1")
    assert [w.left for w in collector.workers() if w.name == "n1"] == [500.0]


def test_the_report_is_written_when_the_run_ends(tmp_path: Path) -> None:
    said: list[str] = []
    listener = usage_listener(tmp_path, "tok", "local", lambda: None, said.append, {})
    assert listener is not None and listener.slurm_job == ""
    first = record("k")
    listener.handed_over([first])
    listener.ended(first, Finished("k", True, seconds=2.0, usage=USAGE))
    listener.run_ended("snakemake --executor dask-slurm")
    assert (tmp_path / "latest" / "jobs.tsv").exists(), list(tmp_path.iterdir())
    assert said and any("report.html" in line for line in said), said
    assert usage_listener(None, "tok", "local", lambda: None, said.append, {}) is None

"""The executor's hand-over to Dask when Dask refuses jobs (a client that lost its
scheduler): those jobs are unregistered and failed with a sentence, not a traceback."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from distributed import Client, LocalCluster
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

from snakemake_executor_plugin_dask_slurm.dispatch.dispatcher import Dispatcher
from snakemake_executor_plugin_dask_slurm.executor import Executor
from snakemake_executor_plugin_dask_slurm.worker.tasks import TaskSpec


def job(jobid: int) -> Any:
    return SimpleNamespace(is_group=lambda: False, name="thin", jobid=jobid, attempt=1)


def test_jobs_dask_refuses_are_unregistered_and_failed_with_a_reason(tmp_path: Path) -> None:
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
    ) as cluster:
        client = Client(cluster)
        dispatcher = Dispatcher(client, lambda: None)
        client.close()  # what a client that lost its scheduler refuses with
    executor: Any = object.__new__(Executor)  # the hand-over needs none of Snakemake
    executor._dispatcher = dispatcher
    executor.config = SimpleNamespace(run_dir=tmp_path)
    tasks = []
    executor._jobs = {}
    for jobid, cpus in ((1, 1), (2, 2)):
        key = f"thin-{jobid}"
        executor._jobs[key] = SubmittedJobInfo(job(jobid), external_jobid=key)
        spec = TaskSpec(key, ("true",), str(tmp_path), (), str(tmp_path / f"{key}.log"), None)
        tasks.append((spec, {"cpus": cpus}))

    lost = executor._hand_over(tasks)

    assert [info.external_jobid for info, _ in lost] == ["thin-1", "thin-2"]
    assert executor._jobs == {}
    msg = lost[0][1]
    assert msg.startswith("rule thin (jobid 1, attempt 1) could not be handed to the Dask ")
    assert "(ClosedClientError: " in msg and f"see its log in {tmp_path / 'logs'}" in msg

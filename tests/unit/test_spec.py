"""The cluster plan (pure): a whole srun plan pinned in a golden file, and the pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.security import PlainTcp, RunCredentials
from snakemake_executor_plugin_dask_slurm.clusters.spec import (
    Paths,
    dashboard_address,
    file_locking_env,
    group_resources,
    local_layout,
    plan_local,
    plan_srun,
    render,
)
from snakemake_executor_plugin_dask_slurm.config import RunConfig
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.slurm.allocation import read_allocation
from snakemake_executor_plugin_dask_slurm.slurm.layout import NodeGroup, plan_layout

GOLDEN = Path(__file__).parent / "golden"
PY = "/venv/bin/python"
#: What an `salloc -N3 --exclusive --mem=2000` shell sees on the project's test cluster.
ALLOCATION = {
    "SLURM_JOB_ID": "25",
    "SLURM_JOB_NODELIST": "n[1-3]",
    "SLURM_JOB_CPUS_PER_NODE": "4(x2),8",
    "SLURM_MEM_PER_NODE": "2000",
}


def config(**changes: object) -> RunConfig:
    values: dict[str, object] = dict(
        cluster="srun", cluster_reason="test", workers=None, cpus=None, scheduler_file=None,
        scheduler_address=None, run_dir=Path("/work/run"), interface=None,
        scheduler_host=None, local_directory=None, file_locking="dask-default",
        startup_timeout=120.0, srun_args=(), worker_args=(), direct_shell=True,
        nanny=False, dashboard=True, dashboard_address=None, insecure=False,
        landing_margin=120.0, runtime_margin=30.0,
        tls_files=(None, None, None),
    )  # fmt: skip
    values.update(changes)
    return RunConfig(**values)  # type: ignore[arg-type]


def srun_plan_text(cfg: RunConfig) -> str:
    alloc = read_allocation(ALLOCATION, ["n1", "n2", "n3"], 2, 2)
    layout = plan_layout(alloc, cfg.workers)
    security = RunCredentials(Path("/work/run/tls-login1-4242"))
    spec = plan_srun(cfg, alloc, layout, "10.77.0.1", "/usr/bin/srun", PY, 4242, security)
    return render(spec)


@pytest.mark.parametrize(
    ("name", "cfg"),
    [
        ("srun-4-4-8.txt", config()),
        ("srun-4-4-8-six-workers-nanny.txt",
         config(workers=6, nanny=True, file_locking="off", srun_args=("--cpu-bind=none",))),
    ],
)  # fmt: skip
def test_the_plan_for_a_4_4_8_allocation_is_what_the_golden_file_says(
    name: str, cfg: RunConfig
) -> None:
    golden = GOLDEN / name
    assert golden.exists(), (
        f"{golden} is missing: write it from render() output after checking every line by "
        "hand (this test never writes it)"
    )
    assert srun_plan_text(cfg) == golden.read_text()


def test_the_local_plan() -> None:
    spec = plan_local(
        config(cluster="local", workers=2), 4, "test", 8000, "127.0.0.1", PY, 7, PlainTcp()
    )
    assert spec.expected_workers == 2
    assert [w.name for w in spec.workers] == [
        "local Dask worker local-0",
        "local Dask worker local-1",
    ]
    assert spec.workers[0].argv[:8] == (
        PY, "-m", "snakemake_executor_plugin_dask_slurm.worker.supervisor", "--name", "local-0",
        "--record-dir", "/work/run/workers", "--restarts",
    )  # fmt: skip
    assert "cpus=2,mem_mb=4000" in spec.workers[0].argv
    assert spec.scheduler.env == (
        ("DASK_SLURM_OWNER_PID", "7"),
        ("DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL", "30s"),
        ("DASK_SLURM_DASHBOARD", "first-visit"),  # the pages at their first visit
    )
    assert "--no-dashboard" in spec.scheduler.argv
    assert spec.description.startswith("local Dask cluster: 2 worker process(es) x 2 thread(s)")


@pytest.mark.parametrize(
    ("cpus", "workers", "expected"), [(2, None, (1, 2)), (8, 3, (3, 2)), (4, 4, (4, 1))]
)
def test_local_layout(cpus: int, workers: int | None, expected: tuple[int, int]) -> None:
    assert local_layout(cpus, workers) == expected


def test_local_layout_refuses_more_workers_than_cpus() -> None:
    with pytest.raises(DaskSlurmError, match="--dask-slurm-workers 5 is more than the 4 CPUs"):
        local_layout(4, 5)


def test_group_resources_share_a_node_and_refuse_workers_without_a_gpu() -> None:
    alloc = read_allocation(ALLOCATION | {"SLURM_GPUS_PER_NODE": "2"}, ["n1", "n2", "n3"], 2, 2)
    group = NodeGroup(("n3",), 8, 2, 4)
    # 2000 MiB per node is 2097 MB (mem_mb's unit), shared by two workers.
    assert group_resources(group, alloc) == {"cpus": 4, "mem_mb": 1048, "gpus": 1}
    with pytest.raises(DaskSlurmError, match="some workers would get no GPU at all"):
        group_resources(NodeGroup(("n3",), 8, 4, 2), alloc)


def test_file_locking_and_dashboard_settings() -> None:
    assert file_locking_env("dask-default") == ()
    assert file_locking_env("off") == (("DASK_DISTRIBUTED__WORKER__USE_FILE_LOCKING", "False"),)
    assert dashboard_address(config()) == "127.0.0.1:0"
    assert dashboard_address(config(dashboard_address=":8787")) == ":8787"


def test_plain_tcp_adds_nothing_and_tls_names_files_only() -> None:
    alloc = read_allocation(ALLOCATION, ["n1", "n2", "n3"], 2, 2)
    layout = plan_layout(alloc, None)
    plain = plan_srun(config(), alloc, layout, None, "srun", PY, 1, PlainTcp())
    assert not any("tls" in arg for p in (plain.scheduler, *plain.workers) for arg in p.argv)
    assert plain.scheduler.env == (
        ("DASK_SLURM_OWNER_PID", "1"),
        ("DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL", "30s"),
        ("DASK_SLURM_DASHBOARD", "first-visit"),
    )
    quiet = plan_srun(config(dashboard=False), alloc, layout, None, "srun", PY, 1, PlainTcp())
    assert "DASK_SLURM_DASHBOARD" not in dict(quiet.scheduler.env)  # no pages at all
    security = RunCredentials(Path("/r/tls-h-1"))
    tls = plan_srun(config(), alloc, layout, None, "srun", PY, 1, security)
    scheduler = tls.scheduler.argv
    assert scheduler[scheduler.index("--protocol") + 1] == "tls"
    for process in (tls.scheduler, *tls.workers):
        argv = list(process.argv)
        assert argv[argv.index("--tls-key") + 1] == "/r/tls-h-1/run-key.pem"
        assert argv[argv.index("--tls-cert") + 1] == "/r/tls-h-1/run-ca-and-cert.pem"
        assert argv[argv.index("--tls-ca-file") + 1] == "/r/tls-h-1/run-ca-and-cert.pem"
        assert ("DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "True") in process.env
    for worker in tls.workers:  # the workers' own HTTP servers: loopback
        argv = list(worker.argv)
        assert argv[argv.index("--dashboard-address") + 1] == "127.0.0.1:0"


def test_paths() -> None:
    paths = Paths.of(config())
    assert (paths.logs, paths.records, paths.scheduler_file) == (
        Path("/work/run/logs"), Path("/work/run/workers"), Path("/work/run/logs/scheduler.json")
    )  # fmt: skip

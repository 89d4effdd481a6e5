from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.config import MIN_WORKER_TTL, choose_cluster, resolve
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings

IN_JOB = {"SLURM_JOB_ID": "42"}


@pytest.mark.parametrize(
    ("requested", "env", "expected"),
    [
        ("auto", {}, "local"),
        ("auto", IN_JOB, "srun"),
        ("local", IN_JOB, "local"),
        ("srun", IN_JOB, "srun"),
        ("attach", {}, "attach"),
    ],
)
def test_choose_cluster(requested: str, env: dict[str, str], expected: str) -> None:
    assert choose_cluster(requested, env)[0] == expected


def test_auto_says_why() -> None:
    assert choose_cluster("auto", IN_JOB)[1] == "inside SLURM allocation 42"
    assert "SLURM_JOB_ID is not set" in choose_cluster("auto", {})[1]


def test_srun_outside_an_allocation_says_how_to_get_one() -> None:
    with pytest.raises(DaskSlurmError, match="salloc") as e:
        choose_cluster("srun", {})
    assert "SLURM_JOB_ID is not set" in str(e.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ExecutorSettings(cluster="pbs"), "Valid values are: auto, local, srun, sbatch, attach"),
        (ExecutorSettings(file_locking="maybe"), "Valid values are: dask-default, on, off"),
        (ExecutorSettings(workers=0), "--dask-slurm-workers must be at least 1, got 0"),
        (ExecutorSettings(cpus=-2), "--dask-slurm-cpus must be at least 1"),
        (ExecutorSettings(startup_timeout=0), "--dask-slurm-startup-timeout"),
        (ExecutorSettings(cluster="attach"), "needs a scheduler to attach to"),
        (
            ExecutorSettings(cluster="attach", scheduler_address="tcp://a:1",
                             scheduler_file=Path("f")),
            "not both",
        ),
        (ExecutorSettings(scheduler_address="tcp://a:1"), "only applies to --dask-slurm-cl"),
        (ExecutorSettings(srun_args="--x 'unclosed"), "Cannot split --dask-slurm-srun-args"),
        (ExecutorSettings(dashboard_address="8787"), "expected HOST:PORT or :PORT"),
        (ExecutorSettings(worker_ttl=1), "--dask-slurm-worker-ttl must be at least 5 seconds, got"),
        (ExecutorSettings(worker_ttl=4), "Dask counts a worker as stopped only after 10"),
        (ExecutorSettings(landing_margin=-1), "--dask-slurm-landing-margin must be 0 or more"),
        (ExecutorSettings(runtime_margin=-5), "--dask-slurm-runtime-margin must be 0 or more"),
        (ExecutorSettings(status_interval=-1), "--dask-slurm-status-interval must be 0 or more"),
        (ExecutorSettings(dashboard_address="http://h:1"), "expected HOST:PORT or :PORT"),
    ],
)  # fmt: skip
def test_invalid_settings_are_refused_with_the_valid_choices(
    settings: ExecutorSettings, message: str
) -> None:
    with pytest.raises(DaskSlurmError, match=message.replace("(", r"\(")):
        resolve(settings, {}, Path("/wd"))


def test_the_least_worker_ttl_is_accepted_and_named_in_its_help() -> None:
    assert resolve(ExecutorSettings(worker_ttl=MIN_WORKER_TTL), {}, Path("/wd")).worker_ttl == 5
    ttl = next(f for f in dataclasses.fields(ExecutorSettings) if f.name == "worker_ttl")
    assert f"at least {MIN_WORKER_TTL}," in ttl.metadata["help"]


def test_resolve_defaults() -> None:
    config = resolve(ExecutorSettings(), {}, Path("/wd"))
    assert config.cluster == "local"
    assert config.run_dir == Path("/wd/.snakemake/dask-slurm")
    assert (config.direct_shell, config.nanny, config.dashboard) == (True, False, True)
    assert config.srun_args == () and config.worker_args == ()
    assert config.startup_timeout == 120.0
    # Secure by default: TLS (not insecure), the dashboard on loopback (no address).
    assert (config.insecure, config.dashboard_address) == (False, None)
    assert config.tls_files == (None, None, None)
    assert (config.landing_margin, config.runtime_margin) == (120.0, 30.0)


def test_security_settings_and_where_they_apply() -> None:
    config = resolve(ExecutorSettings(insecure=True, dashboard_address=":8787"), {}, Path("/wd"))
    assert (config.insecure, config.dashboard_address) == (True, ":8787")
    assert config.warnings == ()
    attach = ExecutorSettings(
        cluster="attach", scheduler_address="tls://h:1", insecure=True,
        tls_ca_file=Path("/ca.pem"), tls_cert=Path("/c.pem"), tls_key=Path("/k.pem"),
    )  # fmt: skip
    config = resolve(attach, {}, Path("/wd"))
    assert config.tls_files == ("/ca.pem", "/c.pem", "/k.pem")
    assert config.warnings == (
        "--dask-slurm-insecure is ignored when attaching to a scheduler the plugin does "
        "not start (it applies to local, srun and sbatch mode).",
    )
    local = resolve(ExecutorSettings(tls_cert=Path("/c.pem")), {}, Path("/wd"))
    assert local.warnings == (
        "--dask-slurm-tls-cert is ignored on the local cluster (it applies to attach mode).",
    )


def test_resolve_splits_extra_arguments_like_a_shell_without_running_one() -> None:
    settings = ExecutorSettings(
        srun_args="--mem=0 --comment 'a b'", worker_args="--memory-limit 4GB", run_dir=Path("rd")
    )
    config = resolve(settings, IN_JOB, Path("/wd"))
    assert config.cluster == "srun"
    assert config.srun_args == ("--mem=0", "--comment", "a b")
    assert config.worker_args == ("--memory-limit", "4GB")
    assert config.run_dir == Path("/wd/rd")


def test_no_boolean_setting_defaults_to_true() -> None:
    # A True default breaks Snakemake's command-line parsing (an unprefixed --no-x flag).
    defaults = ExecutorSettings()
    assert [k for k, v in vars(defaults).items() if v is True] == []


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("tcp://10.0.0.5:8786", True),
        ("10.0.0.5:8786", True),
        ("tls://node-1.cluster:8786", True),
        ("tcp://[::1]:8786", True),
        ("10.0.0.5", False),
        ("tcp://host", False),
        ("tcp://host:port", False),
    ],
)
def test_scheduler_address_needs_a_port(address: str, ok: bool) -> None:
    settings = ExecutorSettings(cluster="attach", scheduler_address=address)
    if ok:
        assert resolve(settings, {}, Path("/wd")).scheduler_address == address
    else:
        with pytest.raises(DaskSlurmError, match="expected PROTOCOL://HOST:PORT"):
            resolve(settings, {}, Path("/wd"))


@pytest.mark.parametrize(
    ("settings", "where", "warned"),
    [
        (ExecutorSettings(), Path("/wd/.snakemake/dask-slurm/usage"), False),
        (ExecutorSettings(run_dir=Path("/scratch/r")), Path("/scratch/r/usage"), False),
        (ExecutorSettings(usage_report_dir=Path("reports")), Path("/wd/reports"), False),
        (ExecutorSettings(no_usage_report=True), None, False),
        (ExecutorSettings(no_usage_report=True, usage_report_dir=Path("x")), None, True),
    ],
)
def test_where_the_usage_report_goes(
    settings: ExecutorSettings, where: Path | None, warned: bool
) -> None:
    config = resolve(settings, {}, Path("/wd"))
    assert config.usage_report_dir == where
    assert any("--dask-slurm-usage-report-dir is ignored" in w for w in config.warnings) == warned

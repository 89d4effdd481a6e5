"""The supervisor's own arguments and the worker names it gives."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.worker.supervisor import parse_args, worker_name


@pytest.mark.parametrize(
    ("env", "hostname", "name", "indexed", "expected"),
    [
        ({"SLURMD_NODENAME": "n3"}, "n3.cluster.example", None, False, "n3"),
        ({}, "laptop", None, False, "laptop"),
        ({"SLURMD_NODENAME": " "}, "laptop", None, False, "laptop"),
        ({"SLURMD_NODENAME": "n3", "SLURM_LOCALID": "1"}, "n3", None, True, "n3-1"),
        ({"SLURMD_NODENAME": "n3"}, "n3", "local-0", False, "local-0"),
    ],
)
def test_worker_name(
    env: dict[str, str], hostname: str, name: str | None, indexed: bool, expected: str
) -> None:
    assert worker_name(env, hostname, name, indexed) == expected


@pytest.mark.parametrize(
    "argv", [["--record-dir", "/w", "--", "--name", "x"], ["--record-dir", "/w", "--nthreads"]]
)
def test_supervisor_refuses_a_worker_name_or_a_missing_separator(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)

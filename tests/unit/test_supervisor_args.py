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
    "argv",
    [
        ["--record-dir", "/w", "--", "--name", "x"],
        ["--record-dir", "/w", "--nthreads"],
        # options on stdin come once: none on the command line, and no restarts
        ["--record-dir", "/w", "--worker-args-on-stdin", "--", "--nthreads", "2"],
        ["--record-dir", "/w", "--restarts", "3", "--worker-args-on-stdin", "--"],
    ],
    ids=["name", "no-separator", "stdin-and-options", "stdin-and-restarts"],
)
def test_supervisor_refuses_a_worker_name_or_a_missing_separator(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_options_on_stdin_start_the_worker_with_its_own_flag() -> None:
    from snakemake_executor_plugin_dask_slurm.worker.dask_main import ARGS_ON_STDIN
    from snakemake_executor_plugin_dask_slurm.worker.supervisor import Supervisor

    opts = parse_args(["--name", "local", "--record-dir", "/w", "--worker-args-on-stdin", "--"])
    assert opts.args_on_stdin and opts.worker_args == ()
    argv = Supervisor(opts, {}).argv()
    assert argv[3:] == [ARGS_ON_STDIN, "distributed.cli.dask_worker", "--name", "local"]
    plain = parse_args(["--name", "local", "--record-dir", "/w", "--", "--nthreads", "2"])
    assert not plain.args_on_stdin
    assert ARGS_ON_STDIN not in Supervisor(plain, {}).argv()

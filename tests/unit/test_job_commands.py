from __future__ import annotations

from snakemake_executor_plugin_dask_slurm.dispatch.group_runner import MODULE as GROUP_RUNNER
from snakemake_executor_plugin_dask_slurm.dispatch.job_commands import (
    shell_argv,
    shell_wrapper,
    thread_environment,
    with_group_runner,
)


def test_shell_argv_is_what_snakemakes_shell_runs() -> None:
    # snakemake.shell: " ".join((prefix, cmd, suffix)).strip(), run with shell=True and
    # the shell as executable, i.e. [shell, "-c", that].
    assert shell_argv("echo 'a b' > out", ("/usr/bin/bash", "set -euo pipefail; ", "")) == (
        "/usr/bin/bash",
        "-c",
        "set -euo pipefail;  echo 'a b' > out",
    )
    assert shell_argv("x", ("/bin/sh", "", "; echo done")) == ("/bin/sh", "-c", "x ; echo done")


def test_default_wrapper_is_bash_strict_mode() -> None:
    executable, prefix, suffix = shell_wrapper()
    assert executable.endswith("/bash")
    assert (prefix, suffix) == ("set -euo pipefail; ", "")


def test_thread_environment() -> None:
    assert dict(thread_environment(3)) == {
        "OMP_NUM_THREADS": "3",
        "GOTO_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "VECLIB_MAXIMUM_THREADS": "3",
        "NUMEXPR_NUM_THREADS": "3",
    }


def test_group_jobs_start_their_snakemake_through_the_group_runner() -> None:
    python = "/venv/bin/python3"
    command = f"export A='1' && {python} -m snakemake --snakefile S --mode remote"
    assert with_group_runner(command, python) == (
        f"export A='1' && {python} -m {GROUP_RUNNER} --snakefile S --mode remote"
    )
    # Another interpreter may not have the plugin: the command is left as it is.
    other = "python -m snakemake --snakefile S"
    assert with_group_runner(other, python) == other

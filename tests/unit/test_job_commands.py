from __future__ import annotations

from snakemake.deployment.env_modules import EnvModules

from snakemake_executor_plugin_dask_slurm.dispatch.direct_command import (
    shell_argv,
    thread_environment,
)
from snakemake_executor_plugin_dask_slurm.dispatch.general_command import (
    GENERAL_SHELL,
    general_argv,
    with_group_runner,
)
from snakemake_executor_plugin_dask_slurm.dispatch.group_runner import MODULE as GROUP_RUNNER
from snakemake_executor_plugin_dask_slurm.snakemake_internals.shell import (
    wrapper as shell_wrapper,
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


def test_shell_argv_loads_modules_as_snakemakes_shell_does() -> None:
    # snakemake.shell: env_modules.shellcmd(" ".join((prefix, cmd, suffix)).strip())
    wrapper = ("/usr/bin/bash", "set -euo pipefail; ", "")
    assert shell_argv("echo x > out", wrapper, EnvModules("tool/1.0", "extra/2")) == (
        "/usr/bin/bash",
        "-c",
        "module purge && MODULES_VERBOSITY=concise module load tool/1.0 extra/2; "
        "set -euo pipefail;  echo x > out",
    )


def test_a_general_way_job_command_runs_without_a_shell_in_between() -> None:
    env = (("A", "0"),)
    plain = "/venv/bin/python3 -m snakemake --snakefile '/w/S x' --mode remote"
    assert general_argv(plain, env) == (
        ("/venv/bin/python3", "-m", "snakemake", "--snakefile", "/w/S x", "--mode", "remote"),
        env,
    )
    exported = "export B='1' C=\"it's\" && /venv/bin/python3 -m snakemake --cores 1"
    assert general_argv(exported, env) == (
        ("/venv/bin/python3", "-m", "snakemake", "--cores", "1"),
        (("A", "0"), ("B", "1"), ("C", "it's")),
    )
    # any other shape runs through bash, which keeps exported functions (not /bin/sh)
    assert GENERAL_SHELL.endswith("/bash")
    for other in ("cd /w && python3 -m snakemake", "python3 -m snakemake $HOME", "make all"):
        assert general_argv(other, env) == ((GENERAL_SHELL, "-c", other), env)


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

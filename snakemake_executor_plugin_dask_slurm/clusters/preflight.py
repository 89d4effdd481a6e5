"""Check, before starting anything, that the commands the plugin will run exist.

A missing ``distributed`` or an option the installed Dask does not know would otherwise
show up as a scheduler or worker that exits seconds later, or as workers that never
arrive, with the reason buried in a log. Asking ``--help`` first turns that into one
message naming the interpreter, what is missing and how to install it.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..errors import DaskSlurmError
from ..worker.supervisor import WORKER_HELP
from .dask_argv import SCHEDULER_MODULE, SUPERVISOR_MODULE, WORKER_MODULE, dask_option_names

#: Seconds each ``--help`` may take (it imports distributed: about a second, more on a
#: loaded machine or a slow shared filesystem).
PREFLIGHT_TIMEOUT = 60.0
_OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*")
# Successful --help answers per (interpreter, module): a run checks several option sets.
_help_cache: dict[tuple[str, str], str] = {}


class PreflightError(DaskSlurmError):
    """A command the plugin needs is missing or does not accept the plugin's options."""


def _install_hint(python: str, module: str) -> str:
    if module == SUPERVISOR_MODULE:
        return (
            f"Install this plugin and Dask's distributed in that environment ('{python} -m "
            "pip install snakemake-executor-plugin-dask-slurm'), or point the plugin at an "
            "interpreter that has them."
        )
    return (
        f"Install Dask's distributed in that environment ('{python} -m pip install "
        '"distributed>=2026.8"\'), or point the plugin at an interpreter that has it.'
    )


def _options_in_process(module: str) -> str | None:
    """The options of ``module``'s click command, when it can be read in this process.

    For this very interpreter, importing the command and reading its declared options
    answers the same question as running ``--help`` in a subprocess, in milliseconds
    instead of the second it takes to import distributed again.
    """
    target = WORKER_MODULE if module == SUPERVISOR_MODULE else module
    try:
        importlib.import_module(module)
        command = importlib.import_module(target).main
        params = command.params
    except Exception:  # let the subprocess say what is wrong
        return None
    opts = (opt for p in params for opt in (*p.opts, *p.secondary_opts))
    return " ".join(opt for opt in opts if opt.startswith("--"))


def _help_text(python: str, module: str, timeout: float) -> str:
    """What ``python -m module --help`` printed; PreflightError if it could not run."""
    if (python, module) in _help_cache:
        return _help_cache[python, module]
    if python == sys.executable:
        options = _options_in_process(module)
        if options is not None:
            _help_cache[python, module] = options
            return options
    command = [python, "-m", module, WORKER_HELP if module == SUPERVISOR_MODULE else "--help"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except OSError as error:
        raise PreflightError(
            f"The Python interpreter {python!r} cannot be run ({error.strerror}), so Dask "
            "cannot be started with it. Check that the path names an installed Python."
        ) from error
    except subprocess.TimeoutExpired as error:
        raise PreflightError(
            f"'{shlex.join(command)}' did not answer within {timeout:g} s. The environment "
            "may be on a slow or hung file system; try again, or raise the start-up timeout."
        ) from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise PreflightError(
            f"'{shlex.join(command)}' failed with exit code {done.returncode}, so the plugin "
            f"cannot start Dask with {python}. It said:\n  " + "\n  ".join(said) + "\n"
            f"{_install_hint(python, module)}"
        )
    _help_cache[python, module] = done.stdout
    return done.stdout


def _missing(help_text: str, wanted: Sequence[str]) -> list[str]:
    known = set(_OPTION.findall(help_text))
    return [option for option in wanted if option not in known]


#: What the user knows each module as.
_COMMAND = {
    SCHEDULER_MODULE: "dask scheduler",
    WORKER_MODULE: "dask worker",
    SUPERVISOR_MODULE: "dask worker",
}


def check_dask_cli(
    python: str,
    scheduler_options: Sequence[str],
    worker_options: Sequence[str],
    timeout: float,
    worker_module: str = WORKER_MODULE,
    user_worker_options: Sequence[str] = (),
) -> None:
    """Check that ``python`` can run Dask's scheduler and worker with these options.

    Options are names such as ``--nworkers`` (``commands.dask_option_names`` extracts them
    from a built command). Pass ``worker_module=SUPERVISOR_MODULE`` for the plugin's workers:
    its ``--worker-help`` is Dask's worker help reached through the plugin's supervisor, so it also
    proves the plugin is importable there. Each ``--help`` runs once per interpreter. An
    option of ``user_worker_options`` (--dask-slurm-worker-args) the worker does not accept
    is blamed on that setting, not on the installation.
    """
    wanted = {SCHEDULER_MODULE: scheduler_options, worker_module: worker_options}
    # Both at once: each --help imports distributed, about a second apiece.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {m: pool.submit(_help_text, python, m, timeout) for m in wanted}
    failures = [f.exception() for f in futures.values() if f.exception() is not None]
    if failures:  # both, when both failed: they can fail for different reasons
        raise PreflightError("\n".join(dict.fromkeys(str(e) for e in failures)))
    texts = {module: future.result() for module, future in futures.items()}
    missing = {m: _missing(texts[m], options) for m, options in wanted.items()}
    users = [o for o in missing[worker_module] if o in user_worker_options]
    if users:
        raise PreflightError(
            f"--dask-slurm-worker-args: 'dask worker' does not accept {', '.join(users)} "
            f"(the Dask installed for {python}). Check the option against 'dask worker "
            "--help', or leave it out."
        )
    problems = [
        f"'{_COMMAND.get(module, module)}' does not accept {', '.join(options)}"
        for module, options in missing.items()
        if options
    ]
    if problems:
        raise PreflightError(
            f"The Dask installed for {python} does not accept options the plugin passes: "
            f"{'; '.join(problems)}. Its distributed is probably older or newer than the "
            f"plugin supports (2026.8 to <2027). {_install_hint(python, WORKER_MODULE)}"
        )


def check_plan(
    scheduler_argv: Sequence[str] | None,
    worker_argvs: Sequence[Sequence[str]],
    user_worker_args: Sequence[str] = (),
) -> None:
    """The one preflight of a plan: this interpreter's ``dask scheduler`` accepts every
    option of ``scheduler_argv`` (None: no scheduler of ours), and ``dask worker``, reached
    through the plugin's supervisor, every option of the ``worker_argvs``, each once; an
    option of ``user_worker_args`` (--dask-slurm-worker-args) it refuses is named as the
    setting's."""
    scheduler = dask_option_names(scheduler_argv) if scheduler_argv else ()
    options = dict.fromkeys(o for argv in worker_argvs for o in dask_option_names(argv))
    workers = (*options, "--name") if options else ()  # --name: the supervisor adds it
    check_dask_cli(
        sys.executable, scheduler, workers, PREFLIGHT_TIMEOUT,
        worker_module=SUPERVISOR_MODULE, user_worker_options=dask_option_names(user_worker_args),
    )  # fmt: skip

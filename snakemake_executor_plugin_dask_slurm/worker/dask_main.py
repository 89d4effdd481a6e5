"""``python -m <this module> <Dask's command module> <its arguments>``: run ``dask scheduler``
or ``dask worker`` exactly as ``python -m <module> <arguments>`` would, in a process that does
without NumPy.

Importing distributed imports NumPy when it is installed (``distributed.protocol.utils``
allocates its receive buffers with it), and NumPy's import is about 0.2 CPU-s of the 0.6
that a Dask process spends before it does anything (docs/benchmarks.md, issue 32): a fifth
of what every run costs the plugin besides its jobs, paid by the scheduler and by every
worker. Neither needs it: they move the plugin's small messages, never arrays, and NumPy is
optional to dask and distributed alike (``import numpy`` raising ImportError is the
configuration they fall back to: a ``bytearray`` per buffer). The jobs are not touched:
each is a process of its own, started with ``exec``, which imports what it likes.

The dashboard's pages need NumPy (through Bokeh): :func:`allow_numpy` lifts the block
before the scheduler's preload sets them up at their first visit. Set
``DASK_SLURM_DASK_NUMPY=1`` to leave NumPy importable from the start (for a Dask preload or
plugin of your own that needs it).

A worker also starts its warm process here, before Dask's import, when the run named a job
command for it to parse (:func:`start_warm_early`): the import of Snakemake and the parse,
the longest step before a run's first warm job, then overlap the worker's own start instead
of following it.

``python -m <this module> --args-on-stdin <Dask's worker module> <its first arguments>``: the
rest of the worker's arguments come later, as one line of JSON (a list of strings) on stdin.
Local mode starts its (one-process, ``--no-nanny``) workers this way before it has planned
the cluster (:mod:`..clusters.early`), so that the warm process, started here first, imports
Snakemake while Snakemake's own process is still busy with its start (one core idle then).
No line (stdin closed: the run ended before its cluster's launch): the process exits 1,
saying so, and its warm process with it.

Before Dask's command runs, the run's HTTP token check is installed (:func:`guard_http`,
:mod:`.http_guard`): the scheduler's and the workers' HTTP servers answer only requests
that carry the run's token. For a worker started early, once its arguments have come
(the token file is made with the run's credentials, before the cluster's launch).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from collections.abc import Mapping, MutableMapping, Sequence

from . import DASK_MAIN_MODULE, DASK_WORKER_MODULE

#: Set to 1 (in the environment of the run): the scheduler and workers may import NumPy.
NUMPY_VARIABLE = "DASK_SLURM_DASK_NUMPY"
#: What Dask's worker command puts in its environment as it starts
#: (``distributed.proctitle.enable_proctitle_on_children``), before its preloads run.
DASK_PARENT_VARIABLE = "__DASK_PARENT_PID"
#: Before the module: the rest of its arguments come on stdin (one JSON line).
ARGS_ON_STDIN = "--args-on-stdin"


def block_numpy(env: Mapping[str, str] = os.environ) -> bool:
    """Make ``import numpy`` raise ImportError in this process, as if NumPy were not
    installed (a ``None`` in ``sys.modules``); not when NumPy is imported already or
    ``DASK_SLURM_DASK_NUMPY=1``. True if it was blocked."""
    if env.get(NUMPY_VARIABLE) == "1" or "numpy" in sys.modules:
        return False
    sys.modules["numpy"] = None  # type: ignore[assignment]
    return True


def allow_numpy() -> None:
    """Undo :func:`block_numpy` (NumPy is imported afresh by its next importer)."""
    if "numpy" in sys.modules and sys.modules["numpy"] is None:
        del sys.modules["numpy"]


def start_warm_early(
    args: Sequence[str], env: MutableMapping[str, str] = os.environ, *, deferred: bool = False
) -> bool:
    """In a worker (``args`` Dask's worker command's, one process: ``--no-nanny``) whose run
    named a job command to parse (``warm_host.PRIME_VARIABLE``): start its warm process now
    and have it parse that command (:func:`.warm_host.prime_from_env`), before the worker
    imports Dask, 0.4-0.6 s of its start on 2 busy cores; the preload would otherwise start
    it after. The warm process is this process's child either way (the worker's).

    Its environment is the one it would have had from the preload: Dask's worker command
    adds :data:`DASK_PARENT_VARIABLE` before its preloads run, so it is added here first
    (the same value, this process's pid), and a warm job's environment stays a cold
    job's (tests/test_warm.py). ``deferred``: the rest of the worker's arguments come
    later (:data:`ARGS_ON_STDIN`, which only one-process workers are started with). True
    if the warm process was started."""
    from .warm_host import PRIME_VARIABLE, prime_from_env

    if not (deferred or one_process(args)) or not env.get(PRIME_VARIABLE):
        return False
    env[DASK_PARENT_VARIABLE] = str(os.getpid())
    return prime_from_env(env)


def one_process(args: Sequence[str]) -> bool:
    """Whether Dask's worker command runs the worker in this process: ``--no-nanny`` the
    last of it and ``--nanny`` (the last one given wins, as Dask's command line reads them;
    with a nanny, the worker is another process, whose warm process this would not be)."""
    flags = [a for a in args if a in ("--nanny", "--no-nanny")]
    return bool(flags) and flags[-1] == "--no-nanny"


def to_devnull(fd: int = 0) -> None:
    """Make ``fd`` /dev/null (read-only): what it was, this process holds no more."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def read_args_line(fd: int = 0) -> list[str] | None:
    """One line of JSON on ``fd``: a list of strings (None: end of file before a line);
    then ``fd`` is /dev/null, so that nothing this process starts holds the pipe."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    to_devnull(fd)
    if not data.strip():
        return None
    args = json.loads(data)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"not a list of strings: {data[:200]!r}")
    return args


def guard_http(module: str) -> None:
    """Put this run's token check in front of the HTTP server Dask's command is about to
    make (:mod:`.http_guard`), or exit saying why it cannot be: never serve unchecked."""
    from . import http_guard

    try:
        token = http_guard.read_token()
    except http_guard.TokenUnreadable as e:
        sys.exit(f"dask-slurm: {module} not started: {e}")
    if token is not None:
        http_guard.install(token)


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    deferred = args[:1] == [ARGS_ON_STDIN]
    if deferred:
        args = args[1:]
    if not args or args[0].startswith("-"):
        sys.exit(f"usage: python -m {DASK_MAIN_MODULE} [{ARGS_ON_STDIN}] MODULE [ARGS...]")
    module, rest = args[0], args[1:]
    if module == DASK_WORKER_MODULE:
        try:
            start_warm_early(rest, deferred=deferred)
        except Exception as e:  # a head start, not a condition of the worker's start
            print(
                f"dask-slurm: the warm process was not started with the worker "
                f"({type(e).__name__}: {e}); the first warm job starts it",
                file=sys.stderr,
            )
    if deferred:
        try:
            more = read_args_line()
        except ValueError as e:
            sys.exit(f"dask-slurm: {module}'s arguments on stdin are not a JSON list: {e}")
        if more is None:
            sys.exit(
                f"dask-slurm: {module} was started before the cluster's launch and its "
                "arguments never came (the run ended before it launched its cluster): "
                "nothing to do"
            )
        rest = [*rest, *more]
    block_numpy()
    guard_http(module)
    sys.argv = [sys.argv[0], *rest]  # run_module sets argv[0] to the module's file, as -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

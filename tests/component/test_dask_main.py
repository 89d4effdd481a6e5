"""worker/dask_main.py: Dask's command modules run as ``python -m`` would, without NumPy
(the e2e check of the real scheduler and worker is in tests/test_security.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.warm import ZYGOTE_MODULE
from snakemake_executor_plugin_dask_slurm.warm.tasks import PRIMING
from snakemake_executor_plugin_dask_slurm.worker import DASK_MAIN_MODULE, DASK_WORKER_MODULE
from snakemake_executor_plugin_dask_slurm.worker.dask_main import (
    ARGS_ON_STDIN,
    DASK_PARENT_VARIABLE,
    NUMPY_VARIABLE,
    start_warm_early,
)
from snakemake_executor_plugin_dask_slurm.worker.proctree import pid_alive
from snakemake_executor_plugin_dask_slurm.worker.warm_host import PRIME_VARIABLE
from tests.component.prime import write_prime
from tests.waiting import eventually

#: A module that says what it was run as and whether NumPy can be imported.
PROBE = """
import sys
try:
    import numpy
    numpy_state = "importable"
except ImportError:
    numpy_state = "blocked"
if __name__ == "__main__":
    print(__name__, sys.argv[0].endswith("probe_mod.py"), sys.argv[1:], numpy_state)
"""


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE, *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path), **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_module_runs_as_main_with_its_arguments_and_without_numpy(tmp_path: Path) -> None:
    pytest.importorskip("numpy")  # installed with the dashboard's Bokeh
    assert run(tmp_path, "probe_mod", "--a", "b") == "__main__ True ['--a', 'b'] blocked"


def test_numpy_stays_importable_when_the_user_says_so(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    out = run(tmp_path, "probe_mod", env={NUMPY_VARIABLE: "1"})
    assert out == "__main__ True [] importable"


def test_without_a_module_it_says_how_it_is_called() -> None:
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    usage = f"usage: python -m {DASK_MAIN_MODULE} [{ARGS_ON_STDIN}] MODULE [ARGS...]"
    assert done.stderr.strip() == usage


#: A module that says its arguments and what its stdin is.
STDIN_PROBE = """
import os, sys
print(sys.argv[1:], os.readlink("/proc/self/fd/0"))
"""


@pytest.mark.parametrize(
    ("line", "code", "said"),
    [
        (b'["b", "--c d"]\n', 0, "['--a', 'b', '--c d'] /dev/null"),
        (b'["b"]', 0, "['--a', 'b'] /dev/null"),  # the writer closed without a newline
        (b"", 1, "its arguments never came (the run ended before it launched its cluster)"),
        (b'{"b": 1}\n', 1, "arguments on stdin are not a JSON list: not a list of strings"),
    ],
    ids=["line", "no-newline", "none", "not-a-list"],
)
def test_arguments_on_stdin_follow_the_ones_given(
    tmp_path: Path, line: bytes, code: int, said: str
) -> None:
    """--args-on-stdin: the rest of the module's arguments are one JSON line on stdin;
    the module then has /dev/null as its stdin. Without the line, or with something else,
    it exits 1 saying why (no traceback) and never runs the module."""
    (tmp_path / "stdin_probe.py").write_text(STDIN_PROBE)
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE, ARGS_ON_STDIN, "stdin_probe", "--a"],
        input=line, cwd=tmp_path, capture_output=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == code, err
    assert said in (out if code == 0 else err)
    assert "Traceback" not in err


def test_allow_numpy_lifts_the_block_in_the_process() -> None:
    code = (
        "from snakemake_executor_plugin_dask_slurm.worker import dask_main\n"
        "assert dask_main.block_numpy()\n"
        "try:\n    import numpy\nexcept ImportError:\n    print('blocked')\n"
        "dask_main.allow_numpy()\nimport numpy\nprint('imported', numpy.__name__)\n"
    )
    pytest.importorskip("numpy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["blocked", "imported numpy"], done.stderr


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _zygote_of(pid: int) -> int | None:
    for child in _children(pid):
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if ZYGOTE_MODULE.encode() in cmdline:
            return int(child)
    return None


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


@pytest.mark.parametrize("deferred", [False, True], ids=["options-given", "options-on-stdin"])
def test_a_worker_starts_its_warm_process_before_dask_does(tmp_path: Path, deferred: bool) -> None:
    """A worker whose run named a job command to parse starts its warm process before it
    imports Dask: this one has no preload and waits for a scheduler file that never comes,
    and its warm process parses the workflow all the same, with the environment the
    preload would have given it (Dask's worker command's variable added, the run's naming
    variable taken out); it ends with the worker. Started before its options are known
    (local mode's early start), it does so before they come, then takes them."""
    prime = write_prime(tmp_path)
    options = ["--scheduler-file", str(tmp_path / "never.json"), "--no-nanny"]
    worker = subprocess.Popen(
        [
            sys.executable, "-m", DASK_MAIN_MODULE, *([ARGS_ON_STDIN] if deferred else []),
            DASK_WORKER_MODULE, *([] if deferred else options),
        ],
        cwd=tmp_path, stdin=subprocess.PIPE if deferred else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, PRIME_VARIABLE: str(prime)},
    )  # fmt: skip
    zygote = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the zygote said it primes, and forked a server
            logs = list((tmp_path / "logs").glob("warm-*.log"))
            zygote = _zygote_of(worker.pid)
            if logs and PRIMING in logs[0].read_text() and zygote and _children(zygote):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"no warm process parsed: {[p.read_text() for p in logs]}")
        assert zygote is not None
        env = _environ(zygote)
        assert env[DASK_PARENT_VARIABLE] == str(worker.pid)
        assert PRIME_VARIABLE not in env
        assert not (tmp_path / "one.txt").exists()  # parsed, nothing run
        if deferred:  # the worker still waits for its options; then Dask's command runs
            assert worker.stdin is not None
            assert os.readlink(f"/proc/{worker.pid}/fd/0").startswith("pipe:")
            assert os.readlink(f"/proc/{zygote}/fd/0") == "/dev/null"
            worker.stdin.write((json.dumps(options) + "\n").encode())
            worker.stdin.close()
            eventually(
                "the worker took its options (its stdin /dev/null then)",
                lambda: os.readlink(f"/proc/{worker.pid}/fd/0") == "/dev/null",
                timeout=30,
            )
        time.sleep(0.5)
        # the server parsed and stays (a refused parse would end it and say why)
        text = logs[0].read_text()
        assert "cannot go the warm way" not in text and _children(zygote), text
        assert worker.poll() is None  # Dask's command waits for the scheduler file
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if worker.stdin is not None:
            worker.stdin.close()
    deadline = time.monotonic() + 10
    while zygote is not None and pid_alive(zygote) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert zygote is None or not pid_alive(zygote), "the warm process outlived its worker"


@pytest.mark.parametrize(
    "args", [[], ["--nanny"], ["--no-nanny", "--nanny"], ["--nthreads", "2"]], ids=str
)
def test_a_worker_with_a_nanny_leaves_its_warm_process_to_the_worker(args: list[str]) -> None:
    """With a nanny (Dask's default; the last of --nanny/--no-nanny wins) the worker is
    another process: nothing is started here and the variable is left for its preload."""
    env = {PRIME_VARIABLE: "/nonexistent/prime.json"}
    assert start_warm_early(args, env) is False
    assert env == {PRIME_VARIABLE: "/nonexistent/prime.json"}


def test_a_prime_file_it_cannot_use_never_stops_the_worker(tmp_path: Path) -> None:
    """An early start that fails says so in one line and the worker's command goes on."""
    (tmp_path / "prime.json").write_text("{}")  # no job command in it
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE, DASK_WORKER_MODULE, "--no-nanny", "--version"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, PRIME_VARIABLE: str(tmp_path / "prime.json")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout
    assert "dask-slurm: the warm process was not started with the worker (KeyError" in done.stderr

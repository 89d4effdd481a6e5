"""The worker's side of the warm path, where its safety rests on small rules: a job the
warm side may have started before it died is never run cold blindly, and a job of unknown
pid never makes the worker signal its own process group."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from snakemake_executor_plugin_dask_slurm.worker.warm_link import (
    Pending,
    WarmLost,
    WarmProc,
    ZygoteLink,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why

pytestmark = pytest.mark.component


def zygote_without_process() -> ZygoteLink:
    """The message handler of a warm host, without starting a warm process."""
    found = object.__new__(ZygoteLink)
    found._lock = threading.Lock()
    found.pending, found.running, found.refused, found.how = {}, {}, None, None
    found._heard, found.ready = threading.Event(), False
    return found


def test_a_job_lost_before_it_said_it_started_is_lost_not_cold() -> None:
    zygote = zygote_without_process()
    zygote.pending["k"] = pending = Pending()
    zygote._handle({"op": "lost", "key": "k", "reason": "its warm server died"})
    proc = pending.result
    assert isinstance(proc, WarmProc) and proc.pid == 0  # pid unknown
    with pytest.raises(WarmLost, match="its warm server died"):
        proc.wait()
    # cold is only what the warm side says it never started
    zygote.pending["c"] = cold = Pending()
    zygote._handle({"op": "cold", "key": "c", "cold": ["other-cwd", "/w"]})
    assert cold.result == Cold(Why.OTHER_CWD, "/w")


def test_started_and_exited_reach_the_waiting_job() -> None:
    zygote = zygote_without_process()
    zygote.pending["k"] = pending = Pending()
    zygote._handle({"op": "started", "key": "k", "pid": 4242})
    proc = pending.result
    assert isinstance(proc, WarmProc) and proc.pid == 4242 and proc.poll() is None
    zygote._handle({"op": "exited", "key": "k", "status": -11})
    assert proc.wait() == -11


UNKNOWN_PID = """
import signal
from snakemake_executor_plugin_dask_slurm.worker import proctree, running
from snakemake_executor_plugin_dask_slurm.worker.warm_link import WarmProc
proc = WarmProc("k", 0)
running.signal_group(proc, signal.SIGKILL)
proctree.signal_group(0, signal.SIGKILL)
proctree.signal_group(1, signal.SIGKILL)
print("alive")
"""


def test_a_job_of_unknown_pid_never_signals_the_workers_own_group() -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNKNOWN_PID], capture_output=True, text=True, timeout=60,
        start_new_session=True,  # were it killpg(0), only this process's group would go
    )  # fmt: skip
    assert done.stdout.strip() == "alive", done


def test_a_warm_process_that_could_not_start_sends_every_later_job_cold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its ``failed`` message's reason is the Cold of every later job of the worker; no
    warm process is started again (the policy's table: tests/unit/test_warm_decisions.py)."""
    from snakemake_executor_plugin_dask_slurm.worker import warm_host
    from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec, WarmSpec

    link = zygote_without_process()
    link.python, link.alive = sys.executable, False
    link._handle({"op": "failed", "cold": ["internals-changed", "missing: x"]})
    refused = Cold(Why.INTERNALS_CHANGED, "missing: x")
    assert link.refused == refused

    def never(*args: object) -> None:
        raise AssertionError("a warm process started again")

    monkeypatch.setattr(warm_host, "start_zygote", never)
    host = warm_host.WarmHost()
    host._link = link
    warm = WarmSpec(sys.executable, ("--cores", "1"), (), False, "/nonexistent")
    spec = TaskSpec("k", ("true",), "/", (), "/nonexistent/k.log", None, warm=warm)
    assert host.start(spec) == refused
    assert host.start(spec) == refused and host.pids() == set()


def test_the_jobs_of_a_warm_process_that_could_not_start_say_so_once() -> None:
    """What a pending or running job of a warm process that could not start is told
    (warm_link's ``_gone``): the start named once, the reason's text and its detail."""
    from snakemake_executor_plugin_dask_slurm.worker.warm_link import could_not_start

    assert could_not_start(Cold(Why.CANNOT_START, "OSError: x")) == (
        "the worker's warm process could not start (OSError: x)"
    )
    assert could_not_start(Cold(Why.INTERNALS_CHANGED, "Snakemake 9.1, missing: x")) == (
        "the warm process could not start: this Snakemake's internals differ from those the "
        "warm path knows (Snakemake 9.1, missing: x)"
    )


SERVER_CRASH = """
import json, os, socket, sys
from snakemake_executor_plugin_dask_slurm.warm import child, primed
from snakemake_executor_plugin_dask_slurm.worker.warm_protocol import Inbox

when = sys.argv[1]

def prime(self):
    if when == "prime":
        raise RuntimeError("a bug in the parse")
    return None

def started(**kwargs):  # the job is forked: the server fails before it says so
    raise RuntimeError("a bug after the fork")

def job(request, close, context):
    os._exit(0)

primed.Server.prime = prime
primed.Started = started
child.become_job = job
ours, theirs = socket.socketpair()
pid = os.fork()
if pid == 0:
    ours.close()
    primed.run_server(theirs, {"op": "run", "key": "k", "env": [], "cwd": "/"}, None, None)
theirs.close()
data = b""
while chunk := ours.recv(65536):
    data += chunk
os.waitpid(pid, 0)
print(json.dumps(Inbox().feed(data)))
"""


@pytest.mark.parametrize(
    ("when", "said"),
    [
        # nothing forked yet: a refusal, and its jobs go cold
        (
            "prime",
            [{"op": "unsupported", "cold": ["server-failed", "RuntimeError: a bug in the parse"]}],
        ),
        # a job forked, its Started not sent: no refusal (its jobs are reported lost, never
        # run a second time cold)
        ("after-fork", []),
    ],
)
def test_a_primed_server_that_fails_refuses_only_before_it_forked_a_job(
    when: str, said: list[object]
) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-c", SERVER_CRASH, when], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == said

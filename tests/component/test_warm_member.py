"""A group's ``run:`` member asked of the zygote (warm/member.py): whatever the zygote
answers, or if it cannot be reached, the member's socket is closed before it returns (a
group job spawns many members: a leaked socket per member would add up)."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import warnings
from collections.abc import Callable, Iterator

import pytest

from snakemake_executor_plugin_dask_slurm.warm import member
from snakemake_executor_plugin_dask_slurm.worker.warm_protocol import (
    GoCold,
    Message,
    Op,
    Run,
    encode,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why

pytestmark = pytest.mark.component

REQUEST = Run(op=Op.RUN, key="g/member1-1", argv=["--mode", "subprocess"], env=[], cwd="/")


def address(tag: str) -> str:
    return f"\0dask-slurm-test-member-{os.getpid()}-{tag}"


@contextlib.contextmanager
def no_unclosed_socket() -> Iterator[None]:
    """Fails if a socket was left for the garbage collector to close."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    leaked = [w for w in seen if issubclass(w.category, ResourceWarning)]
    assert not leaked, [str(w.message) for w in leaked]


def zygote_answering(name: str, answer: Callable[[socket.socket], None]) -> threading.Thread:
    """A listener at ``name`` that takes one request and answers it with ``answer``."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                socket.recv_fds(conn, 1 << 16, 3)  # the request, with stdin, stdout, stderr
                answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def send(msg: Message) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(encode(msg))


def test_an_unreachable_zygote_leaves_no_socket_open() -> None:
    with no_unclosed_socket():
        found = member.run_warm(REQUEST, address("nobody"))
    assert isinstance(found, Cold) and found.why is Why.ZYGOTE_UNREACHABLE, found


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        (
            send(GoCold(op=Op.COLD, key="k", cold=Cold(Why.OTHER_CWD, "/").to_wire())),
            Cold(Why.OTHER_CWD, "/"),
        ),
        (send({"op": Op.EXITED, "key": "k", "status": 3}), 3),
        (lambda conn: None, Cold(Why.WARM_GONE, "it closed the connection")),  # never started
    ],
)
def test_whatever_the_zygote_answers_the_socket_is_closed(
    answer: Callable[[socket.socket], None], status: int | Cold
) -> None:
    name = address(f"answer-{id(answer)}")
    thread = zygote_answering(name, answer)
    with no_unclosed_socket():
        assert member.run_warm(REQUEST, name) == status
    thread.join(timeout=10)


@pytest.mark.parametrize(
    ("command", "said"),
    [
        # its spawn command has no `cd DIR &&`: decided here
        (
            "python -m snakemake --mode subprocess",
            "dask-slurm: r: a fresh Snakemake: its group member's spawn command is not one the "
            "warm path can run (no `cd DIR &&` before it)\n",
        ),
        # the zygote cannot be reached: decided here
        (
            "cd / && python -m snakemake --mode subprocess",
            "dask-slurm: r: a fresh Snakemake: its group job's process could not reach the "
            "warm process (ConnectionRefusedError: [Errno 111] Connection refused)\n",
        ),
    ],
)
def test_a_member_spawned_fresh_for_its_groups_reason_says_so_in_the_groups_log(
    command: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    spawned: list[object] = []
    spawn_job = member.spawner(
        lambda executor, job: spawned.append(job), "g", address("unreachable")
    )
    job = SimpleNamespace(rule=SimpleNamespace(name="r"))
    spawn_job(SimpleNamespace(format_job_exec=lambda j: command), job)
    assert spawned == [job]  # spawned as before
    assert capsys.readouterr().err == said

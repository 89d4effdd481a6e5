"""Faults of the test cluster itself, for tests/test_slurm_faults.py: a node's link cut (its
veth down, then up), slurmctld stopped (SIGSTOP, then SIGCONT), a shorter SlurmdTimeout for
one test. Each undoes itself on leaving, whatever happened inside: a link is always brought
up again, a stopped controller always continued, slurm.conf always restored."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from testcluster import cluster

if TYPE_CHECKING:
    from tests.slurm_cluster.fixtures import SlurmTestCluster


def _ip_link(veth: str, state: str) -> None:
    subprocess.run(["ip", "link", "set", veth, state], check=True, timeout=10)


@contextmanager
def link_cut(test_cluster: SlurmTestCluster, node: str) -> Iterator[float]:
    """``node``'s only link down (its host-side veth): no packet reaches it or leaves it
    until the block is left. Yields the monotonic time of the cut."""
    (veth,) = [n.veth for n in test_cluster.info.nodes if n.name == node]
    _ip_link(veth, "down")
    try:
        yield time.monotonic()
    finally:
        _ip_link(veth, "up")


def controller_pid(test_cluster: SlurmTestCluster) -> int:
    state = cluster.load_state(cluster.Paths(test_cluster.state_dir))
    assert state is not None, "the test cluster has no state"
    (pid,) = [r.pid for r in state.processes if r.role == "slurmctld"]
    return pid


@contextmanager
def controller_stopped(test_cluster: SlurmTestCluster) -> Iterator[float]:
    """slurmctld stopped (SIGSTOP) inside the block: it answers nothing, as a controller
    that hangs; always continued (SIGCONT) on leaving. Yields the time it stopped."""
    pid = controller_pid(test_cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)


def _reconfigure(test_cluster: SlurmTestCluster) -> None:
    done = test_cluster.run(["scontrol", "reconfigure"], timeout=30)
    assert done.returncode == 0, done.stderr


@contextmanager
def slurmd_timeout(test_cluster: SlurmTestCluster, seconds: int) -> Iterator[None]:
    """The cluster's SlurmdTimeout set to ``seconds`` inside the block (slurm.conf edited,
    ``scontrol reconfigure``), SLURM's default (300 s, the test cluster sets none) again
    after it. A node silent for longer is set DOWN and its jobs ended (NODE_FAIL)."""
    conf: Path = test_cluster.slurm_conf
    text = conf.read_text()
    conf.write_text(f"{text}SlurmdTimeout={seconds}\n")
    try:
        _reconfigure(test_cluster)
        yield
    finally:
        conf.write_text(text)
        _reconfigure(test_cluster)


def wait_node_back(test_cluster: SlurmTestCluster, node: str, timeout: float = 90) -> None:
    """Wait until ``node`` is usable again after a cut (ReturnToService=2 brings a node
    that was set DOWN for not responding back once its slurmd registers)."""
    deadline = time.monotonic() + timeout
    while test_cluster.node_states().get(node) not in ("idle", "mixed", "allocated"):
        assert time.monotonic() < deadline, f"{node}: {test_cluster.node_states()}"
        time.sleep(0.5)


def snapshot(workdir: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of every file the workflow writes (out/*, events.log)."""
    paths = [*sorted((workdir / "out").glob("*")), workdir / "events.log"]
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in paths if p.exists()}

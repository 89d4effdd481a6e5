#!/usr/bin/env python3
"""A real multi-node, heterogeneous SLURM test cluster on one Linux machine.

The normal network namespace plays the login/submit host: it owns a Linux bridge with a
private subnet (10.77.0.1/24, forwarding off, no NAT), a private ``munged`` and a
``slurmctld``. Each compute node ``nX`` is its own network + UTS + mount namespace
(hostname ``nX``, address 10.77.0.1X, its own ``/etc/hosts``) joined to the bridge by a
veth pair, running one ``slurmd``. Everything the cluster creates is recorded in its
state directory, and ``stop`` removes exactly that.

Usage (as root, from the repository root)::

    python testcluster/cluster.py start [--nodes 4,4,8]
    eval "$(python testcluster/cluster.py env)"   # then salloc/sbatch/srun
    python testcluster/cluster.py status
    python testcluster/cluster.py stop

Only the standard library is used, so this file runs with any Python >= 3.11.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, NoReturn

DEFAULT_STATE_DIR = Path("/run/dask-slurm-test-cluster")
DEFAULT_NODE_CPUS = (4, 4, 8)
NODES_ENV = "DASK_SLURM_TEST_NODES"
STATE_DIR_ENV = "DASK_SLURM_TEST_DIR"

SUBNET = "10.77.0"
LOGIN_ADDRESS = f"{SUBNET}.1"
BRIDGE = "dsk-br0"
HEAD_HOSTNAME = "head"
CLUSTER_NAME = "dasktest"
PARTITION = "debug"
SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
NODE_MEMORY_MB = 2000
MAX_NODES = 40
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARKER = "# dask-slurm-test-cluster"
RESOLV_CONF = Path("/etc/resolv.conf")
# Nodes have no route to a DNS server: without this, every lookup that misses their
# /etc/hosts (e.g. the AAAA half of getaddrinfo) waits 10 s on the machine's resolver
# and sends packets towards it. Loopback refuses at once.
NODE_RESOLV_CONF = (
    "# dask-slurm test node: no DNS reachable; fail fast on loopback\n"
    "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
)
RUN_NETNS = Path("/run/netns")
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT = 60.0
STATE_VERSION = 1

# program -> Debian package that provides it
REQUIRED_PROGRAMS = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
}
# Inherited variables that would point slurm clients at another cluster or job.
FOREIGN_ENV_PREFIXES = ("SLURM_", "SALLOC_", "SBATCH_", "SRUN_", "SQUEUE_", "SINFO_")

Log = Callable[[str], None]


class ClusterError(RuntimeError):
    """The test cluster could not be started, inspected or stopped; the message says why."""


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Node:
    """One compute node: its SLURM/host name, declared CPUs and bridge address."""

    name: str
    cpus: int
    address: str

    @property
    def netns(self) -> str:
        return f"dask-slurm-{self.name}"

    @property
    def veth(self) -> str:
        return f"dsk-v{self.name}"


@dataclass(frozen=True)
class Paths:
    """Where the cluster keeps its config, keys, sockets, state and logs."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def plugstack_conf(self) -> Path:
        return self.root / "plugstack.conf"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def ctld_state(self) -> Path:
        return self.root / "slurmctld"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def hosts_dir(self) -> Path:
        return self.root / "hosts"

    @property
    def node_resolv_conf(self) -> Path:
        return self.hosts_dir / "resolv.conf"

    def node_hosts(self, node: Node) -> Path:
        return self.hosts_dir / f"{node.name}.hosts"

    def slurmd_log(self, node: Node) -> Path:
        return self.log_dir / f"slurmd-{node.name}.log"

    @property
    def slurmctld_log(self) -> Path:
        return self.log_dir / "slurmctld.log"

    @property
    def munged_log(self) -> Path:
        return self.log_dir / "munged.out"


def parse_node_cpus(spec: str) -> tuple[int, ...]:
    """Parse "4,4,8" into CPU counts, one per node, refusing anything else."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and 1 <= int(p) <= 512 for p in parts):
        raise ClusterError(
            f"Invalid node list {spec!r}: expected comma-separated CPU counts between 1 and "
            f"512, one per node, e.g. '4,4,8'."
        )
    if len(parts) > MAX_NODES:
        raise ClusterError(f"{len(parts)} nodes requested; at most {MAX_NODES} are supported.")
    return tuple(int(p) for p in parts)


def compressed_cpus(cpus: Sequence[int]) -> str:
    """SLURM's SLURM_JOB_CPUS_PER_NODE spelling: [4, 4, 8] -> "4(x2),8"."""
    groups: list[list[int]] = []
    for c in cpus:
        if groups and groups[-1][0] == c:
            groups[-1][1] += 1
        else:
            groups.append([c, 1])
    return ",".join(str(c) if n == 1 else f"{c}(x{n})" for c, n in groups)


def make_nodes(cpus: Sequence[int]) -> tuple[Node, ...]:
    return tuple(
        Node(name=f"n{i}", cpus=c, address=f"{SUBNET}.{10 + i}") for i, c in enumerate(cpus, 1)
    )


def default_node_cpus(environ: Mapping[str, str]) -> tuple[int, ...]:
    spec = environ.get(NODES_ENV, "").strip()
    return parse_node_cpus(spec) if spec else DEFAULT_NODE_CPUS


def default_state_dir(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


# --------------------------------------------------------------------------- config text


def slurm_conf_text(nodes: Sequence[Node], paths: Paths) -> str:
    """The cluster's private slurm.conf (see the project's notes for why each line)."""
    settings = [
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={HEAD_HOSTNAME}({LOGIN_ADDRESS})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={paths.munge_socket}",
        "CredType=cred/munge",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SchedulerParameters=batch_sched_delay=0",
        "MailProg=/bin/true",
        f"PlugStackConfig={paths.plugstack_conf}",
        f"StateSaveLocation={paths.ctld_state}",
        f"SlurmdSpoolDir={paths.spool}/%n",
        f"SlurmctldPidFile={paths.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={paths.run_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={paths.slurmctld_log}",
        f"SlurmdLogFile={paths.log_dir}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]
    node_lines = [
        f"NodeName={n.name} NodeAddr={n.address} NodeHostname={n.name} CPUs={n.cpus} "
        f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
        for n in nodes
    ]
    partition = f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    header = "# Written by testcluster/cluster.py start; removed by its stop."
    return "\n".join([header, *settings, *node_lines, partition, ""])


def node_hosts_text(nodes: Sequence[Node], login_hostname: str) -> str:
    """The /etc/hosts every node sees: loopback, the login host and all nodes."""
    node_names = {n.name for n in nodes}
    login_names = [HEAD_HOSTNAME]
    if login_hostname and login_hostname not in node_names | {HEAD_HOSTNAME, "localhost"}:
        login_names.append(login_hostname)
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{LOGIN_ADDRESS}\t{' '.join(login_names)}",
        *(f"{n.address}\t{n.name}" for n in nodes),
    ]
    return "\n".join(lines) + "\n"


def login_hosts_lines(nodes: Sequence[Node]) -> list[str]:
    """The lines added to the login host's /etc/hosts so that it resolves every node."""
    return [f"{n.address}\t{n.name}\t{HOSTS_MARKER}" for n in nodes]


def hosts_names(text: str) -> dict[str, str]:
    """Map every host name in an /etc/hosts text to the line that defines it."""
    names: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            names.setdefault(name, line)
    return names


# --------------------------------------------------------------------------- state


@dataclass
class ProcessRecord:
    """A daemon this cluster started; start_time guards against pid reuse."""

    role: str
    pid: int
    start_time: int


@dataclass
class State:
    """Everything `start` created, written to disk as soon as it exists."""

    nodes: list[Node]
    processes: list[ProcessRecord] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    hosts_lines: list[str] = field(default_factory=list)
    created_run_netns: bool = False
    version: int = STATE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> State:
        raw = json.loads(text)
        if raw.get("version") != STATE_VERSION:
            raise ClusterError(f"Unknown state file version {raw.get('version')!r}.")
        raw["nodes"] = [Node(**n) for n in raw["nodes"]]
        raw["processes"] = [ProcessRecord(**p) for p in raw["processes"]]
        return cls(**raw)


class Ledger:
    """The on-disk record of a cluster; every change is saved immediately."""

    def __init__(self, paths: Paths, state: State) -> None:
        self.paths = paths
        self.state = state

    def save(self) -> None:
        tmp = self.paths.state_file.with_suffix(".tmp")
        tmp.write_text(self.state.to_json())
        tmp.replace(self.paths.state_file)

    def add(self, kind: Literal["netns", "links", "hosts_lines"], value: str) -> None:
        getattr(self.state, kind).append(value)
        self.save()

    def add_process(self, record: ProcessRecord) -> None:
        self.state.processes.append(record)
        self.save()


def load_state(paths: Paths) -> State | None:
    """The recorded state, None if there is no cluster at paths.root."""
    if not paths.state_file.exists():
        return None
    try:
        return State.from_json(paths.state_file.read_text())
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ClusterError(
            f"Cannot read the cluster state file {paths.state_file}: {exc}. Inspect it and "
            f"remove what it lists by hand (namespaces, links, /etc/hosts lines, pids)."
        ) from exc


# --------------------------------------------------------------------------- commands


def find_program(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SYSTEM_PATH}")


def program(name: str) -> str:
    path = find_program(name)
    if path is None:
        package = REQUIRED_PROGRAMS.get(name, name)
        raise ClusterError(
            f"{name} is not installed. Install the Debian package {package} "
            f"(`cluster.py start` does that when run as root)."
        )
    return path


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one external command; the single place where this module runs programs."""
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=None if env is None else dict(env),
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ClusterError(f"Cannot run `{cmd}`: {argv[0]} was not found.") from exc
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"`{cmd}` did not finish within {timeout:g} s.") from exc
    if check and proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise ClusterError(f"`{cmd}` failed with exit code {proc.returncode}: {output}")
    return proc


def client_env(paths: Paths, base: Mapping[str, str]) -> dict[str, str]:
    """base without variables of other SLURM clusters/jobs, plus this cluster's SLURM_CONF."""
    env = {k: v for k, v in base.items() if not k.startswith(FOREIGN_ENV_PREFIXES)}
    env["SLURM_CONF"] = str(paths.slurm_conf)
    env["PATH"] = f"{env.get('PATH', '')}:{SYSTEM_PATH}".lstrip(":")
    return env


def wait_for(what: str, ready: Callable[[], bool], timeout: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"Timed out after {timeout:g} s waiting for {what}.")
        time.sleep(interval)


# --------------------------------------------------------------------------- packages


def missing_packages() -> list[str]:
    packages = {pkg for prog, pkg in REQUIRED_PROGRAMS.items() if find_program(prog) is None}
    return sorted(packages)


@contextlib.contextmanager
def no_daemon_starts(log: Log) -> Iterator[None]:
    """Keep package scripts from starting system daemons (policy-rc.d exiting 101)."""
    if POLICY_RC_D.exists() or POLICY_RC_D.is_symlink():
        log(f"Keeping the existing {POLICY_RC_D}.")
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# temporary, from dask-slurm test cluster\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def apt_install(packages: Sequence[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    return run_command(argv, env=env, timeout=600, check=False)


def ensure_packages(log: Log) -> None:
    """Install the Debian packages providing missing programs (apt-get update if needed)."""
    missing = missing_packages()
    if not missing:
        return
    log(f"Installing Debian packages: {' '.join(missing)}")
    with no_daemon_starts(log):
        if apt_install(missing).returncode != 0:
            log("apt-get install failed; running apt-get update and trying again")
            run_command(["apt-get", "update"], timeout=600)
            result = apt_install(missing)
            if result.returncode != 0:
                raise ClusterError(
                    f"apt-get install {' '.join(missing)} failed even after apt-get update: "
                    f"{(result.stdout + result.stderr).strip()[-2000:]}"
                )
    still = missing_packages()
    if still:
        raise ClusterError(f"After installing, programs of {', '.join(still)} are still missing.")


# --------------------------------------------------------------------------- processes


_CHILDREN: list[subprocess.Popen[bytes]] = []


def read_proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, None if it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def is_alive(record: ProcessRecord) -> bool:
    """Running and still the same process; zombies count as ended."""
    for child in _CHILDREN:
        child.poll()  # reap our own children so they do not linger as zombies
    stat = read_proc_stat(record.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == record.start_time


def spawn(role: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str]) -> ProcessRecord:
    """Start a foreground daemon in its own session; its pid is the daemon's own."""
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    _CHILDREN.append(proc)
    stat = read_proc_stat(proc.pid)
    if stat is None:
        raise ClusterError(f"{role} exited immediately; see {log_path}.")
    return ProcessRecord(role=role, pid=proc.pid, start_time=stat[1])


def terminate(records: Sequence[ProcessRecord], grace: float = 10.0) -> list[str]:
    """SIGTERM, then SIGKILL after grace; return the ones that would not die."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for r in records:
            if is_alive(r):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, sig)
        with contextlib.suppress(ClusterError):
            wait_for("processes to end", lambda: not any(map(is_alive, records)), wait)
    return [f"{r.role} (pid {r.pid}) did not end" for r in records if is_alive(r)]


def pids_in_netns(names: Sequence[str]) -> list[int]:
    """Processes whose network namespace is one of ours (jobs left behind by slurmd)."""
    ours = set()
    for name in names:
        with contextlib.suppress(OSError):
            ns = os.stat(RUN_NETNS / name)
            ours.add((ns.st_dev, ns.st_ino))
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ns = os.stat(entry / "ns" / "net")
                if (ns.st_dev, ns.st_ino) in ours:
                    found.append(int(entry.name))
    return found


def describe_pid(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        cmd = "?"
    return f"pid {pid} ({cmd})"


def kill_namespace_leftovers(netns: Sequence[str], log: Log) -> list[str]:
    records = []
    for pid in pids_in_netns(netns):
        stat = read_proc_stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            log(f"Ending leftover process in a node namespace: {describe_pid(pid)}")
            records.append(ProcessRecord(role=describe_pid(pid), pid=pid, start_time=stat[1]))
    return terminate(records, grace=3.0)


# --------------------------------------------------------------------------- network


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def ns_exists(name: str) -> bool:
    return (RUN_NETNS / name).exists()


def ip(*args: str) -> None:
    run_command([program("ip"), *args], timeout=30)


def create_bridge(ledger: Ledger) -> None:
    ip("link", "add", BRIDGE, "type", "bridge")
    ledger.add("links", BRIDGE)
    ip("addr", "add", f"{LOGIN_ADDRESS}/24", "dev", BRIDGE)
    # Routing off on the bridge: nothing from the nodes can be forwarded anywhere.
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding").write_text("0\n")
    ip("link", "set", BRIDGE, "up")


def create_node_network(node: Node, ledger: Ledger) -> None:
    if not ledger.state.netns and not RUN_NETNS.exists():
        ledger.state.created_run_netns = True
    ip("netns", "add", node.netns)
    ledger.add("netns", node.netns)
    ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    ledger.add("links", node.veth)
    ip("link", "set", node.veth, "master", BRIDGE, "up")
    ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", "eth0")
    ip("-n", node.netns, "link", "set", "lo", "up")
    ip("-n", node.netns, "link", "set", "eth0", "up")
    ip("-n", node.netns, "route", "add", "default", "via", LOGIN_ADDRESS)


def remove_network(state: State) -> list[str]:
    problems = []
    for name in state.netns:
        if (RUN_NETNS / name).exists():
            try:
                ip("netns", "del", name)
            except ClusterError as exc:
                problems.append(str(exc))
    for name in reversed(state.links):  # veths first, the bridge last
        if link_exists(name):
            with contextlib.suppress(ClusterError):  # a veth may vanish with its namespace
                ip("link", "del", name)
    with contextlib.suppress(ClusterError):
        wait_for("links to disappear", lambda: not any(map(link_exists, state.links)), 5.0)
    problems += [f"network link {n} still exists" for n in state.links if link_exists(n)]
    return problems + remove_run_netns(state)


def remove_run_netns(state: State) -> list[str]:
    """Undo the /run/netns mount `ip netns add` made, if it did so for us and it is empty."""
    if not state.created_run_netns or not RUN_NETNS.exists() or any(RUN_NETNS.iterdir()):
        return []
    with contextlib.suppress(ClusterError):
        run_command(["umount", str(RUN_NETNS)], timeout=30)
    try:
        RUN_NETNS.rmdir()
    except OSError as exc:
        return [f"could not remove {RUN_NETNS}: {exc}"]
    return []


# --------------------------------------------------------------------------- /etc/hosts


def add_hosts_lines(lines: Sequence[str], ledger: Ledger) -> None:
    text = HOSTS_FILE.read_text()
    if text and not text.endswith("\n"):
        text += "\n"
    for line in lines:
        ledger.add("hosts_lines", line)  # recorded first: a crash leaves it removable
    # Rewritten in place (not replaced) so that a bind-mounted /etc/hosts keeps working.
    HOSTS_FILE.write_text(text + "".join(f"{line}\n" for line in lines))


def remove_hosts_lines(lines: Sequence[str]) -> list[str]:
    """Remove exactly the recorded lines (each once) and nothing else."""
    if not lines:
        return []
    try:
        current = HOSTS_FILE.read_text().splitlines(keepends=True)
        remaining = list(lines)
        kept = []
        for line in current:
            if line.rstrip("\n") in remaining:
                remaining.remove(line.rstrip("\n"))
            else:
                kept.append(line)
        if len(kept) != len(current):
            HOSTS_FILE.write_text("".join(kept))
    except OSError as exc:
        return [f"could not remove the cluster's lines from {HOSTS_FILE}: {exc}"]
    return []


# --------------------------------------------------------------------------- preflight


def check_platform() -> str | None:
    """Why this machine cannot build the cluster, or None if it can."""
    if not sys.platform.startswith("linux"):
        return f"the SLURM test cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return f"the SLURM test cluster needs root to start (running as uid {os.geteuid()})"
    return None


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def conflicts(nodes: Sequence[Node]) -> list[str]:
    """Everything already on the machine that starting the cluster would clash with."""
    links = [BRIDGE, *(n.veth for n in nodes)]
    found = [f"network link {name} exists" for name in links if link_exists(name)]
    found += [f"network namespace {n.netns} exists" for n in nodes if ns_exists(n.netns)]
    addrs = run_command([program("ip"), "-o", "-4", "addr", "show"], timeout=30).stdout
    if f" {SUBNET}." in addrs:
        found.append(f"an interface already has an address in {SUBNET}.0/24")
    hosts_text = HOSTS_FILE.read_text()
    node_names = [n.name for n in nodes]
    names = hosts_names(hosts_text)
    found += [f"{HOSTS_FILE} already maps {n}: {names[n]!r}" for n in node_names if n in names]
    if HOSTS_MARKER in hosts_text:
        found.append(f"{HOSTS_FILE} has stale lines ending in {HOSTS_MARKER!r}; delete them")
    found += [f"TCP port {p} is in use" for p in (SLURMCTLD_PORT,) if port_in_use(p)]
    return found


# --------------------------------------------------------------------------- bring-up


def write_files(nodes: Sequence[Node], paths: Paths) -> None:
    for directory in (
        paths.munge_dir,
        paths.log_dir,
        paths.run_dir,
        paths.ctld_state,
        paths.spool,
        paths.hosts_dir,
    ):
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    for node in nodes:
        (paths.spool / node.name).mkdir(mode=0o755, exist_ok=True)
        paths.node_hosts(node).write_text(node_hosts_text(nodes, socket.gethostname()))
    paths.node_resolv_conf.write_text(NODE_RESOLV_CONF)
    paths.munge_dir.chmod(0o755)  # clients of every user must reach the socket
    fd = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as key:
        key.write(os.urandom(1024))
    paths.plugstack_conf.write_text("")
    paths.slurm_conf.write_text(slurm_conf_text(nodes, paths))


def namespace_exec(
    hostname: str, binds: Sequence[tuple[Path, Path]], argv: Sequence[str]
) -> list[str]:
    """argv run by this file's `_exec` helper, which sets the hostname and bind mounts."""
    helper = [sys.executable, str(Path(__file__).resolve()), "_exec", "--hostname", hostname]
    for source, target in binds:
        helper += ["--bind", f"{source}:{target}"]
    return [*helper, "--", *argv]


def node_binds(node: Node, paths: Paths) -> list[tuple[Path, Path]]:
    binds = [(paths.node_hosts(node), HOSTS_FILE)]
    if RESOLV_CONF.exists():
        binds.append((paths.node_resolv_conf, RESOLV_CONF))
    return binds


def start_munged(paths: Paths, ledger: Ledger, env: Mapping[str, str]) -> None:
    argv = [
        program("munged"), "--foreground",  # which logs to stderr, i.e. munged.out
        f"--key-file={paths.munge_key}", f"--socket={paths.munge_socket}",
        f"--pid-file={paths.run_dir / 'munged.pid'}",
        f"--seed-file={paths.munge_dir / 'munged.seed'}",
    ]  # fmt: skip
    ledger.add_process(spawn("munged", argv, paths.munged_log, env))
    wait_for(f"munged's socket {paths.munge_socket}", paths.munge_socket.exists, 15.0)


def start_slurmctld(paths: Paths, ledger: Ledger, env: Mapping[str, str]) -> None:
    daemon = [program("slurmctld"), "-D", "-c", "-f", str(paths.slurm_conf)]
    argv = [program("unshare"), "--uts", "--", *namespace_exec(HEAD_HOSTNAME, [], daemon)]
    ledger.add_process(spawn("slurmctld", argv, paths.log_dir / "slurmctld.out", env))


def start_slurmd(node: Node, paths: Paths, ledger: Ledger, env: Mapping[str, str]) -> None:
    daemon = [program("slurmd"), "-D", "-N", node.name, "-f", str(paths.slurm_conf)]
    argv = [
        program("nsenter"), f"--net={RUN_NETNS / node.netns}", "--",
        program("unshare"), "--uts", "--mount", "--propagation=slave", "--",
        *namespace_exec(node.name, node_binds(node, paths), daemon),
    ]  # fmt: skip
    out = paths.log_dir / f"slurmd-{node.name}.out"
    ledger.add_process(spawn(f"slurmd {node.name}", argv, out, env))


def node_states(env: Mapping[str, str]) -> dict[str, str]:
    """SLURM's short state of every node, e.g. {"n1": "idle"}; empty if slurmctld is down."""
    argv = [program("sinfo"), "-h", "-N", "-o", "%N %t"]
    proc = run_command(argv, env=env, timeout=15, check=False)
    if proc.returncode != 0:
        return {}
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def wait_until_ready(state: State, env: Mapping[str, str], timeout: float) -> None:
    names = [n.name for n in state.nodes]

    def ready() -> bool:
        dead = [r.role for r in state.processes if not is_alive(r)]
        if dead:
            raise ClusterError(f"{', '.join(dead)} exited during start-up.")
        states = node_states(env)
        return all(states.get(name) == "idle" for name in names)

    wait_for("every node to be idle in sinfo", ready, timeout, interval=0.1)


def bring_up(nodes: Sequence[Node], paths: Paths, ledger: Ledger) -> None:
    env = client_env(paths, os.environ)
    write_files(nodes, paths)
    create_bridge(ledger)
    for node in nodes:
        create_node_network(node, ledger)
    add_hosts_lines(login_hosts_lines(nodes), ledger)
    start_munged(paths, ledger, env)
    start_slurmctld(paths, ledger, env)
    for node in nodes:
        start_slurmd(node, paths, ledger, env)
    wait_until_ready(ledger.state, env, START_TIMEOUT)


# --------------------------------------------------------------------------- public API


@dataclass(frozen=True)
class ClusterInfo:
    """What a client needs to use a running cluster."""

    state_dir: Path
    nodes: tuple[Node, ...]
    login_address: str = LOGIN_ADDRESS

    @property
    def slurm_conf(self) -> Path:
        return Paths(self.state_dir).slurm_conf

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """base (default os.environ) prepared for slurm clients of this cluster."""
        return client_env(Paths(self.state_dir), os.environ if base is None else base)


@dataclass(frozen=True)
class Status:
    state: Literal["up", "down", "broken"]
    info: ClusterInfo | None
    problems: tuple[str, ...] = ()
    node_states: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StartResult:
    info: ClusterInfo
    already_running: bool
    seconds: float


def status(state_dir: Path | None = None) -> Status:
    """Whether the cluster at state_dir is up, down, or half there (and why)."""
    paths = Paths(state_dir or default_state_dir(os.environ))
    state = load_state(paths)
    if state is None:
        if paths.root.exists():
            return Status("broken", None, (f"{paths.root} exists but holds no state.json",))
        return Status("down", None)
    info = ClusterInfo(paths.root, tuple(state.nodes))
    problems = [f"{r.role} (pid {r.pid}) is not running" for r in state.processes]
    problems = [p for p, r in zip(problems, state.processes, strict=True) if not is_alive(r)]
    roles = {r.role for r in state.processes}
    expected = {"munged", "slurmctld", *(f"slurmd {n.name}" for n in state.nodes)}
    problems += [f"{role} was never started" for role in sorted(expected - roles)]
    states = node_states(info.env()) if not problems else {}
    bad = {n: s for n, s in states.items() if s.endswith("*") or s in ("down", "drain", "fail")}
    problems += [f"node {n} is {s} in sinfo" for n, s in bad.items()]
    if not problems and not states:
        problems.append("sinfo gets no answer from slurmctld")
    return Status("broken" if problems else "up", info, tuple(problems), states)


def start(
    node_cpus: Sequence[int] | None = None,
    state_dir: Path | None = None,
    log: Log = print,
) -> StartResult:
    """Bring the cluster up (or find it already up) and return how to reach it."""
    began = time.monotonic()
    paths = Paths(state_dir or default_state_dir(os.environ))
    nodes = make_nodes(node_cpus or default_node_cpus(os.environ))
    current = status(paths.root)
    if current.state == "up" and current.info is not None:
        return reuse(current.info, nodes, began)
    reason = check_platform()
    if reason is not None:
        raise ClusterError(f"Cannot start: {reason}.")
    if current.state == "broken":
        if load_state(paths) is None:
            raise ClusterError(
                f"Refusing to start: {paths.root} exists but is not a cluster state directory "
                f"(no state.json). Remove it or choose another with {STATE_DIR_ENV}."
            )
        log(f"Found a half-running cluster ({'; '.join(current.problems)}); stopping it first.")
        leftover = stop(paths.root, log)
        if leftover:
            raise ClusterError("Could not clean up the old cluster: " + "; ".join(leftover))
    fresh_start(nodes, paths, log)
    return StartResult(ClusterInfo(paths.root, nodes), False, time.monotonic() - began)


def reuse(info: ClusterInfo, nodes: Sequence[Node], began: float) -> StartResult:
    if tuple(info.nodes) != tuple(nodes):
        running = ",".join(str(n.cpus) for n in info.nodes)
        raise ClusterError(
            f"A cluster with nodes {running} is already running from {info.state_dir}, not the "
            f"requested {','.join(str(n.cpus) for n in nodes)}. Stop it first (cluster.py stop)."
        )
    return StartResult(info, True, time.monotonic() - began)


def fresh_start(nodes: Sequence[Node], paths: Paths, log: Log) -> None:
    ensure_packages(log)
    found = conflicts(nodes)
    if found:
        raise ClusterError(
            "Refusing to start, because it would overwrite or shadow what is already here:\n  "
            + "\n  ".join(found)
        )
    paths.root.mkdir(mode=0o755, parents=True)
    ledger = Ledger(paths, State(nodes=list(nodes)))
    ledger.save()
    try:
        bring_up(nodes, paths, ledger)
    except (ClusterError, OSError) as exc:
        report = diagnostics(paths.root)
        leftover = stop(paths.root, log)
        undo = "; ".join(leftover) if leftover else "everything it had created was removed"
        raise ClusterError(f"Start-up failed: {exc}\n{report}\nCleanup: {undo}.") from exc


def stop(state_dir: Path | None = None, log: Log = print) -> list[str]:
    """End what start started and remove what it created; return what could not be undone."""
    paths = Paths(state_dir or default_state_dir(os.environ))
    state = load_state(paths)
    if state is None:
        if paths.root.exists():
            return [f"{paths.root} exists but holds no state.json; left it alone"]
        return []
    cancel_all_jobs(state, ClusterInfo(paths.root, tuple(state.nodes)).env())
    problems = terminate(list(reversed(state.processes)))
    problems += kill_namespace_leftovers(state.netns, log)
    problems += remove_network(state) if not problems else ["network left: processes remain"]
    problems += remove_hosts_lines(state.hosts_lines)
    if problems:
        return problems
    shutil.rmtree(paths.root, ignore_errors=True)
    return [f"could not remove {paths.root}"] if paths.root.exists() else []


def cancel_all_jobs(state: State, env: Mapping[str, str]) -> None:
    """Cancel every job so that slurmd ends its steps itself; bounded, best effort."""
    if not any(r.role == "slurmctld" and is_alive(r) for r in state.processes):
        return
    squeue = [program("squeue"), "-h", "-o", "%i"]
    with contextlib.suppress(ClusterError):
        jobs = run_command(squeue, env=env, timeout=15).stdout.split()
        if jobs:
            run_command([program("scancel"), *jobs], env=env, timeout=15, check=False)
            wait_for("jobs to end", lambda: not run_command(squeue, env=env).stdout.strip(), 10)


def tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read: {exc})"


def diagnostics(state_dir: Path | None = None, lines: int = 40) -> str:
    """Log tails of every daemon plus sinfo/squeue, for a failing test or start."""
    paths = Paths(state_dir or default_state_dir(os.environ))
    state = load_state(paths)
    nodes = state.nodes if state else []
    logs = [paths.munged_log, paths.slurmctld_log, *(paths.slurmd_log(n) for n in nodes)]
    logs += sorted(paths.log_dir.glob("*.out")) if paths.log_dir.exists() else []
    logs = [p for p in dict.fromkeys(logs) if p.exists() and p.stat().st_size > 0]
    parts = [f"===== {p} (last {lines} lines) =====\n{tail(p, lines)}" for p in logs]
    env = client_env(paths, os.environ)
    for argv in (["sinfo", "-N", "-l"], ["squeue", "-a", "-l"], ["squeue", "-a", "-s"]):
        try:
            proc = run_command(argv, env=env, timeout=10, check=False)
            out = (proc.stdout + proc.stderr).strip()
        except ClusterError as exc:
            out = str(exc)
        parts.append(f"===== {shlex.join(argv)} =====\n{out}")
    return "\n".join(parts)


# --------------------------------------------------------------------------- CLI


def describe(info: ClusterInfo) -> str:
    nodes = ", ".join(f"{n.name} ({n.cpus} CPUs, {n.address})" for n in info.nodes)
    where = f"state, config and logs in {info.state_dir}"
    return f"nodes {nodes}; login host {info.login_address}; {where}"


def export_lines(info: ClusterInfo) -> str:
    return f"export SLURM_CONF={shlex.quote(str(info.slurm_conf))}"


def cmd_start(args: argparse.Namespace) -> int:
    cpus = parse_node_cpus(args.nodes) if args.nodes else None
    result = start(cpus, args.state_dir)
    verb = "is already up" if result.already_running else f"is up after {result.seconds:.1f} s"
    print(f"SLURM test cluster {verb}: {describe(result.info)}")
    print(f"To use it from a shell:\n  {export_lines(result.info)}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    began = time.monotonic()
    paths = Paths(args.state_dir or default_state_dir(os.environ))
    if not paths.root.exists():
        print(f"SLURM test cluster is not running (no {paths.root}); nothing to stop.")
        return 0
    problems = stop(paths.root)
    if problems:
        print("SLURM test cluster stopped, but these could not be removed:", file=sys.stderr)
        print("  " + "\n  ".join(problems), file=sys.stderr)
        if paths.state_file.exists():
            print(f"The record of them is kept in {paths.state_file}.", file=sys.stderr)
        return 1
    print(f"SLURM test cluster stopped and removed in {time.monotonic() - began:.1f} s.")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    current = status(args.state_dir)
    if current.state == "down":
        print("SLURM test cluster is not running.")
        return 3
    if current.info is not None:
        print(f"SLURM test cluster is {current.state}: {describe(current.info)}")
    for problem in current.problems:
        print(f"  problem: {problem}")
    for name, node_state in current.node_states.items():
        print(f"  {name}: {node_state}")
    return 0 if current.state == "up" else 1


def cmd_env(args: argparse.Namespace) -> int:
    current = status(args.state_dir)
    if current.info is None:
        print("SLURM test cluster is not running; start it with cluster.py start.", file=sys.stderr)
        return 3
    print(export_lines(current.info))
    return 0


def cmd_exec(args: argparse.Namespace) -> NoReturn:
    """Runs inside fresh UTS (+mount) namespaces: set the hostname and /etc/hosts, exec."""
    socket.sethostname(args.hostname)
    for bind in args.bind:
        source, target = bind.split(":", 1)
        run_command(["mount", "--bind", source, target], timeout=30)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    os.execv(argv[0], argv)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    top.add_argument(
        "--state-dir", type=Path, default=None,
        help=f"state/config/log directory (default ${STATE_DIR_ENV} or {DEFAULT_STATE_DIR})",
    )  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True)
    start_cmd = sub.add_parser("start", help="start the cluster (installs packages if missing)")
    start_cmd.add_argument(
        "--nodes", help=f"CPUs per node, e.g. 4,4,8 (default ${NODES_ENV} or 4,4,8)"
    )
    start_cmd.set_defaults(func=cmd_start)
    sub.add_parser("stop", help="stop it and remove all it created").set_defaults(func=cmd_stop)
    sub.add_parser("status", help="up, down or broken").set_defaults(func=cmd_status)
    sub.add_parser("env", help="print the export lines for a shell").set_defaults(func=cmd_env)
    exec_cmd = sub.add_parser("_exec")  # internal: see cmd_exec
    exec_cmd.add_argument("--hostname", required=True)
    exec_cmd.add_argument("--bind", action="append", default=[], metavar="SOURCE:TARGET")
    exec_cmd.add_argument("argv", nargs=argparse.REMAINDER)
    exec_cmd.set_defaults(func=cmd_exec)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())

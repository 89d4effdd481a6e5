"""What another user's process can try against a run's Dask cluster, as real processes
(optionally in another node's network namespace of the SLURM test cluster), and what the
tests read back: listening sockets, command lines, environments, credential files.

Each probe is a separate Python process that has none of the run's credentials: a plain
TCP ``distributed.Client``, a TLS client with freshly made credentials of its own, and a
``dask worker`` with neither or with its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from snakemake_executor_plugin_dask_slurm.clusters.security import make_credentials

#: Connect as a client and print what happened as one JSON line.
CLIENT_PROBE = r"""
import json, sys
from distributed import Client
from distributed.security import Security
address, ca, cert, key = sys.argv[1:5]
security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
                    require_encryption=True) if ca else None
try:
    client = Client(address, timeout=5, security=security, set_as_default=False)
except BaseException as e:
    print(json.dumps({"connected": False, "error": f"{type(e).__name__}: {e}"}))
    sys.exit(0)
workers = client.scheduler_info(n_workers=-1)["workers"].values()
names = sorted(str(w.get("name")) for w in workers)
print(json.dumps({"connected": True, "workers": names}))
client.close()
"""


def in_netns(argv: Sequence[str], netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def foreign_credentials(directory: Path) -> tuple[str, str]:
    """Credentials of someone else's (a valid key and certificate, not the run's):
    ``(cert, key)`` paths; the certificate is its own CA."""
    import datetime

    now = datetime.datetime.now(datetime.UTC)
    key, cert = make_credentials(now, now + datetime.timedelta(hours=1))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "foreign-key.pem").write_bytes(key)
    (directory / "foreign-cert.pem").write_bytes(cert)
    return str(directory / "foreign-cert.pem"), str(directory / "foreign-key.pem")


def try_client(
    address: str, credentials: tuple[str, str, str] | None, netns: str | None = None
) -> dict[str, object]:
    """Connect a client to ``address`` with ``(ca, cert, key)`` (None: plain TCP)."""
    ca, cert, key = credentials or ("", "", "")
    done = subprocess.run(
        in_netns([sys.executable, "-c", CLIENT_PROBE, address, ca, cert, key], netns),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"probe failed: {done.stdout}\n{done.stderr}"
    result: dict[str, object] = json.loads(lines[-1])
    return result


def start_worker(
    address: str, log: Path, credentials: tuple[str, str] | None, netns: str | None = None
) -> subprocess.Popen[bytes]:
    """A ``dask worker`` started by hand, without the run's credentials (with
    ``(cert, key)`` of its own, or none): it must never join."""
    tls = []
    if credentials:
        cert, key = credentials
        tls = ["--tls-ca-file", cert, "--tls-cert", cert, "--tls-key", key]
    argv = [
        sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", "intruder",
        "--nthreads", "1", "--resources", "cpus=1", "--no-nanny", "--death-timeout", "20",
        "--no-dashboard", *tls,
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(in_netns(argv, netns), stdout=out, stderr=subprocess.STDOUT)


def can_connect(host: str, port: int, netns: str | None = None) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted (from ``netns``)."""
    script = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=3).close(); print('yes')\n"
        "except OSError:\n"
        "    print('no')\n"
    )
    if netns is None:
        try:
            socket.create_connection((host, port), timeout=3).close()
            return True
        except OSError:
            return False
    done = subprocess.run(
        in_netns([sys.executable, "-c", script], netns), capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip() == "yes"


def listening(pid: int) -> list[tuple[str, int]]:
    """The IPv4 addresses and ports ``pid`` listens on (in its own network namespace)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and inode in inodes:  # LISTEN
            hexip, hexport = local.split(":")
            ip = socket.inet_ntoa(bytes.fromhex(hexip)[::-1])
            found.append((ip, int(hexport, 16)))
    return found


def leaks(pids: Sequence[int], secrets: Sequence[bytes]) -> list[str]:
    """Which of ``pids`` carry any of ``secrets`` in their command line or environment."""
    found = []
    for pid in pids:
        for part in ("cmdline", "environ"):
            try:
                data = Path(f"/proc/{pid}/{part}").read_bytes()
            except OSError:
                continue
            if any(secret in data for secret in secrets):
                found.append(f"{pid} {part}: {data[:200]!r}")
    return found


def key_secrets(key_pem: bytes) -> list[bytes]:
    """Fragments that would show a key leaked: its PEM marker and lines of its body."""
    body = [line for line in key_pem.splitlines() if line and not line.startswith(b"-----")]
    return [b"PRIVATE KEY", *body]

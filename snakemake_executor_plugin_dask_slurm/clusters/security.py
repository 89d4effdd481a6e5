"""How this run's Dask processes and client authenticate: one object per run, an input of
the plan (:mod:`.spec`) and of the client connection (:func:`.base.connect`).

By default a run makes its own credentials (:class:`RunCredentials`): one private key and
one self-signed certificate that is both the run's CA and every process's certificate, the
recipe of ``distributed.security.Security.temporary()`` but written to files, because the
``dask scheduler``/``dask worker`` command lines take paths. Mutual TLS then means that
only a process holding this run's key can talk to the scheduler, and only the scheduler
holding it can talk to the workers. The files live in a 0700 directory of the run
directory, are referred to by path only (never in a command line, an environment variable
or a job script) and are removed when the cluster closes; a run killed with SIGKILL
leaves them, and the next run in the same run directory removes them.

:class:`PlainTcp` is ``--dask-slurm-insecure``; :class:`AttachSecurity` is what a user
gives for a scheduler somebody else started.

The same directory holds the run's HTTP token (``http-token``: the scheduler's and the
workers' HTTP servers answer only requests that carry it, see
:mod:`..worker.http_guard`), whose path, not the token, the processes get in
:data:`..worker.http_guard.TOKEN_FILE_VARIABLE`, and the dashboard's link with the token
(``dashboard-link``), for its owner. With ``--dask-slurm-insecure`` there is neither:
anyone who can reach the scheduler can run code as you, and the HTTP pages are Dask's,
open as Dask leaves them (on loopback by default).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DaskSlurmError
from ..worker.http_guard import TOKEN_FILE_VARIABLE
from ..worker.proctree import pid_alive

#: Certificates are valid from this long before they are made: node clocks drift.
CLOCK_SKEW = datetime.timedelta(hours=1)
#: How long credentials live when the run's end is not known (outside SLURM, or an
#: allocation without a time limit). A run on a workstation can last days; the files are
#: removed when it ends either way.
DEFAULT_LIFETIME = datetime.timedelta(days=7)
#: Credentials live at least this long, even in an allocation about to end (which is
#: then the run's end anyway).
MIN_LIFETIME = datetime.timedelta(minutes=15)
#: Credential directories in the run directory: ``tls-<host>-<pid>``.
DIRECTORY_PREFIX = "tls-"
#: The certificate's subject: who made it, for whoever reads it back.
COMMON_NAME = "snakemake-executor-plugin-dask-slurm run"
#: Dask setting, passed to the plugin's scheduler and workers: never talk plain TCP.
REQUIRE_ENCRYPTION = (("DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "True"),)


class RunSecurity:
    """The interface: what the plan and the client need from a run's security."""

    #: The scheme the scheduler listens on.
    protocol = "tcp"

    def prepare(self) -> None:
        """Make whatever the processes need, just before they start."""

    def scheduler_args(self) -> tuple[str, ...]:
        """Extra ``dask scheduler`` options."""
        return ()

    def worker_args(self) -> tuple[str, ...]:
        """Extra ``dask worker`` options."""
        return ()

    def env(self) -> tuple[tuple[str, str], ...]:
        """Environment the plugin's scheduler and workers get (never key material)."""
        return ()

    def client(self) -> Any:
        """The ``security=`` argument of the plugin's client (None: Dask's defaults)."""
        return None

    def check_address(self, address: str) -> None:
        """Fail if the scheduler's address does not use the protocol this run needs."""

    def describe(self) -> str:
        """One line for the log: what protects the cluster."""
        return ""

    def close(self) -> None:
        """Remove whatever :meth:`prepare` made; safe to call more than once."""

    def http_token(self) -> str | None:
        """The token the run's HTTP servers ask for (None: they ask for none)."""
        return None

    def keep_link(self, link: str) -> Path | None:
        """Write the dashboard's ``link`` (with the token) to a file only its owner can
        read; that file (None: nowhere to keep it)."""
        return None


class PlainTcp(RunSecurity):
    """``--dask-slurm-insecure``: Dask's plain, unauthenticated TCP."""

    def describe(self) -> str:
        return (
            "plain TCP without authentication (--dask-slurm-insecure): any process that "
            "can reach the scheduler can run code as you on every worker"
        )


def make_credentials(now: datetime.datetime, not_after: datetime.datetime) -> tuple[bytes, bytes]:
    """A new private key and a self-signed certificate for it, both PEM: ``(key, cert)``.

    The certificate is its own CA (``BasicConstraints ca=True``), valid from
    ``now - CLOCK_SKEW`` to ``not_after``; an EC P-256 key, which makes handshakes cheaper
    than the RSA-2048 of ``Security.temporary()``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, COMMON_NAME)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("dask-internal")]), False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file that only its owner can read (0600 from the start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def remove_stale(run_dir: Path, host: str) -> list[Path]:
    """Remove credential directories left in ``run_dir`` by runs on ``host`` whose process
    is gone (killed with SIGKILL); what was removed."""
    removed = []
    with contextlib.suppress(OSError):
        for path in run_dir.glob(f"{DIRECTORY_PREFIX}{host}-*"):
            pid = path.name.rpartition("-")[2]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


@dataclass
class RunCredentials(RunSecurity):
    """This run's own TLS key and certificate (the default)."""

    directory: Path
    #: How long the run may last (the allocation's time left); None: not known.
    lifetime: datetime.timedelta | None = None
    not_after: datetime.datetime | None = None

    protocol = "tls"

    @classmethod
    def for_run(cls, run_dir: Path, lifetime: datetime.timedelta | None) -> RunCredentials:
        return cls(run_dir / f"{DIRECTORY_PREFIX}{socket.gethostname()}-{os.getpid()}", lifetime)

    @property
    def cert(self) -> Path:
        return self.directory / "run-ca-and-cert.pem"

    @property
    def key(self) -> Path:
        return self.directory / "run-key.pem"

    @property
    def token_file(self) -> Path:
        return self.directory / "http-token"

    @property
    def link_file(self) -> Path:
        return self.directory / "dashboard-link"

    def prepare(self) -> None:
        remove_stale(self.directory.parent, socket.gethostname())
        self.close()  # never reuse files found there: new credentials for every cluster
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        self.not_after = now + max(self.lifetime or DEFAULT_LIFETIME, MIN_LIFETIME)
        try:
            import cryptography  # noqa: F401
        except ImportError as e:  # a dependency; only a broken environment lacks it
            raise DaskSlurmError(
                f"Cannot make this run's TLS credentials: {e}. The 'cryptography' package "
                "is a dependency of the plugin; reinstall the plugin, or run without "
                "encryption on a machine only you use with --dask-slurm-insecure."
            ) from None
        key, cert = make_credentials(now, self.not_after)
        try:
            self.directory.mkdir(mode=0o700)
            self.directory.chmod(0o700)  # whatever the umask
            write_private(self.key, key)
            write_private(self.cert, cert)
            write_private(self.token_file, secrets.token_urlsafe(32).encode())
        except OSError as e:
            self.close()
            raise DaskSlurmError(
                f"Cannot write this run's TLS credentials to {self.directory}: "
                f"{e.strerror or e}. Choose a run directory you can write with "
                "--dask-slurm-run-dir."
            ) from None

    def _files(self) -> tuple[str, ...]:
        return ("--tls-ca-file", str(self.cert), "--tls-cert", str(self.cert),
                "--tls-key", str(self.key))  # fmt: skip

    def scheduler_args(self) -> tuple[str, ...]:
        return ("--protocol", "tls", *self._files())

    def worker_args(self) -> tuple[str, ...]:
        return self._files()  # the protocol comes with the scheduler's address

    def env(self) -> tuple[tuple[str, str], ...]:
        return (*REQUIRE_ENCRYPTION, (TOKEN_FILE_VARIABLE, str(self.token_file)))

    def http_token(self) -> str | None:
        try:
            return self.token_file.read_text().strip() or None
        except OSError:
            return None

    def keep_link(self, link: str) -> Path | None:
        try:
            self.link_file.unlink(missing_ok=True)
            write_private(self.link_file, f"{link}\n".encode())
        except OSError:
            return None
        return self.link_file

    def client(self) -> Any:
        from distributed.security import Security

        return Security(
            tls_ca_file=str(self.cert),
            tls_client_cert=str(self.cert),
            tls_client_key=str(self.key),
            require_encryption=True,
        )

    def check_address(self, address: str) -> None:
        if not address.startswith("tls://"):
            raise DaskSlurmError(
                f"The plugin's scheduler listens at {address}, not on TLS as it was told: "
                "refusing to send jobs over an unauthenticated connection. Check for Dask "
                "configuration that overrides the scheduler's protocol "
                "(distributed.comm.default-scheme)."
            )

    def describe(self) -> str:
        until = f" until {self.not_after:%Y-%m-%d %H:%M} UTC" if self.not_after else ""
        return (
            f"mutual TLS with credentials made for this run (valid{until}; removed at "
            "the end): only this run's processes can connect"
        )

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class AttachSecurity(RunSecurity):
    """Credentials for a scheduler somebody else runs: the settings' files if given, else
    the user's Dask configuration (``distributed.comm.tls.*``)."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None

    def _security(self) -> Any:
        from distributed.security import Security

        given = {
            name: value
            for name, value in (
                ("tls_ca_file", self.ca_file),
                ("tls_client_cert", self.cert),
                ("tls_client_key", self.key),
            )
            if value
        }
        return Security(**given)

    def client(self) -> Any:
        return self._security()

    def has_credentials(self) -> bool:
        config = self._security().get_tls_config_for_role("client")
        return bool(config["ca_file"] and config["cert"])

    def check_address(self, address: str) -> None:
        if address.startswith("tls://") and not self.has_credentials():
            raise DaskSlurmError(
                f"The Dask scheduler at {address} uses TLS, and no credentials to "
                "connect with were given. Name them with --dask-slurm-tls-ca-file, "
                "--dask-slurm-tls-cert and --dask-slurm-tls-key, or set "
                "distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and "
                "distributed.comm.tls.client.key in your Dask configuration."
            )

    def warning(self, address: str) -> str | None:
        """What the user should know about connecting to ``address``, once."""
        if address.startswith("tls://"):
            return None
        return (
            f"the Dask scheduler at {address} does not use TLS: anyone who can reach it "
            "can run code as you on its workers and read what they read. Start it with "
            "TLS credentials (see 'Security' in the plugin's documentation)."
        )

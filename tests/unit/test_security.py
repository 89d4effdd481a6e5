"""This run's TLS credentials (pure parts): the certificate made, the options and client
settings derived from it, attach-mode checks, and the dashboard hint."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from snakemake_executor_plugin_dask_slurm.clusters.security import (
    CLOCK_SKEW,
    AttachSecurity,
    PlainTcp,
    RunCredentials,
    make_credentials,
)
from snakemake_executor_plugin_dask_slurm.errors import DaskSlurmError
from snakemake_executor_plugin_dask_slurm.report.hints import dashboard_hint

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)


def test_the_certificate_is_its_own_ca_for_the_key_made_with_it() -> None:
    not_after = NOW + datetime.timedelta(hours=5)
    key_pem, cert_pem = make_credentials(NOW, not_after)
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert cert.public_key() == key.public_key()
    assert cert.issuer == cert.subject
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_before_utc == NOW - CLOCK_SKEW
    assert cert.not_valid_after_utc == not_after
    assert b"PRIVATE KEY" in key_pem and b"PRIVATE KEY" not in cert_pem


def test_each_run_gets_a_new_key() -> None:
    later = NOW + datetime.timedelta(hours=1)
    assert make_credentials(NOW, later)[0] != make_credentials(NOW, later)[0]


def test_tls_options_name_files_only() -> None:
    security = RunCredentials(Path("/run/tls-h-1"))
    assert security.protocol == "tls"
    assert security.scheduler_args() == (
        "--protocol", "tls",
        "--tls-ca-file", "/run/tls-h-1/run-ca-and-cert.pem",
        "--tls-cert", "/run/tls-h-1/run-ca-and-cert.pem",
        "--tls-key", "/run/tls-h-1/run-key.pem",
    )  # fmt: skip
    assert security.worker_args() == security.scheduler_args()[2:]
    client = security.client()
    assert client.require_encryption
    assert client.tls_client_key == "/run/tls-h-1/run-key.pem"
    assert client.tls_ca_file == "/run/tls-h-1/run-ca-and-cert.pem"


def test_the_plugin_refuses_its_own_scheduler_on_plain_tcp() -> None:
    security = RunCredentials(Path("/run/tls-h-1"))
    security.check_address("tls://10.0.0.1:4000")
    with pytest.raises(DaskSlurmError, match="refusing to send jobs over an unauthenticated"):
        security.check_address("tcp://10.0.0.1:4000")


def test_insecure_says_what_it_gives_away() -> None:
    plain = PlainTcp()
    assert plain.scheduler_args() == plain.worker_args() == plain.env() == ()
    assert plain.client() is None
    assert "can run code as you on every worker" in plain.describe()


def test_attach_needs_credentials_for_a_tls_scheduler_and_warns_on_tcp() -> None:
    bare = AttachSecurity()
    with pytest.raises(DaskSlurmError, match="--dask-slurm-tls-ca-file"):
        bare.check_address("tls://10.0.0.5:8786")
    bare.check_address("tcp://10.0.0.5:8786")
    warning = bare.warning("tcp://10.0.0.5:8786")
    assert warning and "does not use TLS" in warning
    given = AttachSecurity("/ca.pem", "/me.pem", "/me.key")
    given.check_address("tls://10.0.0.5:8786")
    assert given.warning("tls://10.0.0.5:8786") is None
    assert given.client().tls_client_cert == "/me.pem"


def test_attach_takes_credentials_from_dask_config() -> None:
    import dask.config

    tls = {
        "distributed.comm.tls.ca-file": "/c.pem",
        "distributed.comm.tls.client.cert": "/u.pem",
        "distributed.comm.tls.client.key": "/u.key",
    }
    with dask.config.set(tls):
        security = AttachSecurity()
        assert security.has_credentials()
        security.check_address("tls://10.0.0.5:8786")
        assert security.client().tls_client_key == "/u.key"


def test_the_dashboard_hint_names_the_tunnel() -> None:
    inside_sbatch = dashboard_hint(41234, "127.0.0.1", "n1", "login1", "unused")
    assert "'ssh -N -L 41234:127.0.0.1:41234 -J login1 n1'" in inside_sbatch
    assert "http://localhost:41234/status" in inside_sbatch
    salloc_on_login = dashboard_hint(41234, "127.0.0.1", "login1", "login1", "unused")
    assert "'ssh -N -L 41234:127.0.0.1:41234 login1'" in salloc_on_login
    laptop = dashboard_hint(8787, "127.0.0.1", "laptop", None, "unused")
    assert "http://127.0.0.1:8787/status on laptop" in laptop
    public = dashboard_hint(8787, "", "n1", "login1", "http://10.0.0.1:8787/status")
    assert "http://10.0.0.1:8787/status" in public and "without a login" in public


def test_the_dashboard_hint_in_local_mode_is_the_link_only() -> None:
    # The scheduler runs where the user runs Snakemake: no tunnel, no laptop.
    here = dashboard_hint(8787, "127.0.0.1", "ws1", None, "unused", tunnel=False)
    assert here == "Dask dashboard: http://127.0.0.1:8787/status (loopback only)"
    public = dashboard_hint(8787, "", "ws1", None, "http://10.0.0.1:8787/status", tunnel=False)
    assert public.startswith("Dask dashboard: http://10.0.0.1:8787/status (served on every")

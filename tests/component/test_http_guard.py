"""The token check on a real scheduler process, started as the plugin starts it
(``worker.dask_main`` with the scheduler preload, the dashboard set up at its first
visit), without Snakemake: every path refused without the token, and a refused request
never sets the dashboard up; the link sets the cookie and sends on without the token; the
cookie and the ``Authorization`` header get through; no token file, no scheduler. Every
method is refused alike (tornado's own 405 would answer an unknown one first); over HTTPS
(Dask's dashboard TLS settings) the same, with a ``Secure`` cookie."""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.worker import (
    DASK_MAIN_MODULE,
    SCHEDULER_PRELOAD_MODULE,
)
from snakemake_executor_plugin_dask_slurm.worker.http_guard import (
    REFUSED,
    TOKEN_FILE_VARIABLE,
    cookie_name,
)
from snakemake_executor_plugin_dask_slurm.worker.scheduler_preload import DASHBOARD_VARIABLE
from tests.http_probes import PATHS, OwnerSession, page_resources
from tests.waiting import eventually, still_running

TOKEN = "component-test-token-0123456789abcdefghijklmnop"


def scheduler_argv(scheduler_file: Path) -> list[str]:
    return [
        sys.executable, "-m", DASK_MAIN_MODULE, "distributed.cli.dask_scheduler",
        "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1", "--port", "0",
        "--dashboard-address", "127.0.0.1:0", "--no-dashboard",
        "--preload", SCHEDULER_PRELOAD_MODULE,
    ]  # fmt: skip


@contextlib.contextmanager
def guarded_scheduler(tmp: Path, extra: dict[str, str]) -> Iterator[tuple[int, Path]]:
    """(HTTP port, log) of a scheduler whose HTTP server asks for :data:`TOKEN`."""
    (tmp / "http-token").write_text(TOKEN)
    log = tmp / "scheduler.log"
    env = {TOKEN_FILE_VARIABLE: str(tmp / "http-token"), DASHBOARD_VARIABLE: "first-visit"}
    env.update(extra)
    with log.open("w") as sink:
        proc = subprocess.Popen(
            scheduler_argv(tmp / "scheduler.json"),
            env={**_clean_env(), **env}, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually("the scheduler file", (tmp / "scheduler.json").exists, 60, 0.1,
                   still_running(proc, log.read_text))  # fmt: skip
        port = json.loads((tmp / "scheduler.json").read_text())["services"]["dashboard"]
        yield int(port), log
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    with guarded_scheduler(tmp_path_factory.mktemp("guarded"), {}) as started:
        yield started


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("DASK_SLURM", "SLURM_"))}


def test_without_the_token_every_path_is_refused_and_sets_nothing_up(
    scheduler: tuple[int, Path],
) -> None:
    port, log = scheduler
    stranger = OwnerSession("127.0.0.1", port)  # a session that never saw the link
    for path in (*PATHS, "/status?token=wrong", "/status/ws"):
        status, location, body = stranger.get(path, {"Authorization": "token wrong"})
        assert (status, location, body) == (403, "", REFUSED), path
    for method in ("HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PROPFIND"):
        status, _, body = stranger.request(method, "/json/identity.json")
        assert (status, body) == (403, "" if method == "HEAD" else REFUSED), method
    assert stranger.set_cookies == []
    assert stranger.upgrade("/status/ws") == 403
    assert "dashboard pages set up" not in log.read_text()


def test_the_link_sets_a_cookie_that_opens_the_dashboard(scheduler: tuple[int, Path]) -> None:
    port, log = scheduler
    owner = OwnerSession("127.0.0.1", port)
    status, location, _ = owner.get(f"/status?token={TOKEN}&x=1")
    assert (status, location) == (302, "/status?x=1")
    (cookie,) = owner.set_cookies
    assert cookie.startswith(f"{cookie_name(TOKEN)}={TOKEN};")
    assert {"HttpOnly", "Path=/", "SameSite=Strict"} <= {p.strip() for p in cookie.split(";")}
    status, body = owner.follow("/status")
    assert status == 200 and "bokeh" in body.lower(), body[:300]
    assert "dashboard pages set up" in log.read_text()
    resources = page_resources(body)
    assert resources, body[:2000]
    for path in resources:
        assert owner.get(path)[0] == 200, path
    assert owner.follow("/info/main/workers.html")[0] == 200
    assert owner.upgrade("/status/ws") == 101  # Bokeh's websocket, with the cookie
    # Scripts: the header, no cookie.
    script = OwnerSession("127.0.0.1", port)
    status, _, body = script.get("/json/identity.json", {"Authorization": f"token {TOKEN}"})
    assert status == 200 and json.loads(body)["type"] == "Scheduler"
    assert TOKEN not in log.read_text()  # not even in tornado's access log


def test_without_its_token_file_the_scheduler_does_not_start(tmp_path: Path) -> None:
    missing = tmp_path / "http-token"
    done = subprocess.run(
        scheduler_argv(tmp_path / "scheduler.json"),
        env={**_clean_env(), TOKEN_FILE_VARIABLE: str(missing)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stderr.startswith(
        f"dask-slurm: distributed.cli.dask_scheduler not started: cannot read this run's "
        f"HTTP token from {missing} (No such file or directory)"
    ), done.stderr
    assert not (tmp_path / "scheduler.json").exists()


def test_over_https_the_same_and_the_cookie_is_secure(tmp_path: Path) -> None:
    from snakemake_executor_plugin_dask_slurm.clusters.security import make_credentials

    now = datetime.datetime.now(datetime.UTC)
    key, cert = make_credentials(now, now + datetime.timedelta(hours=1))
    (tmp_path / "key.pem").write_bytes(key)
    (tmp_path / "cert.pem").write_bytes(cert)
    tls = {
        "DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CERT": str(tmp_path / "cert.pem"),
        "DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__KEY": str(tmp_path / "key.pem"),
    }
    with guarded_scheduler(tmp_path, tls) as (port, _):
        stranger = OwnerSession("127.0.0.1", port, https=True)
        assert stranger.get("/json/identity.json")[:3:2] == (403, REFUSED)
        owner = OwnerSession("127.0.0.1", port, https=True)
        assert owner.get(f"/json/identity.json?token={TOKEN}")[:2] == (302, "/json/identity.json")
        (cookie,) = owner.set_cookies
        assert "Secure" in {p.strip() for p in cookie.split(";")}
        assert owner.get("/json/identity.json")[0] == 200

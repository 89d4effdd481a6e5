"""The HTTP token check's pure parts: which requests get through, where a link with the
token sends on to, the token's file, what the dashboard's line says of the token, and
when stderr is private enough to print it (worker/http_guard.py, clusters/base.py)."""

from __future__ import annotations

import io
import os
from http.cookies import SimpleCookie
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.clusters.base import private_stream
from snakemake_executor_plugin_dask_slurm.report.hints import dashboard_hint, token_note
from snakemake_executor_plugin_dask_slurm.worker.http_guard import (
    TOKEN_FILE_VARIABLE,
    TokenUnreadable,
    cookie_name,
    read_token,
    verdict,
    without_token,
)

TOKEN = "s3cr3t-token_value"


def request(method: str = "GET", query: str = "", headers: dict[str, str] | None = None) -> Any:
    """What :func:`verdict` reads of a tornado request."""
    from urllib.parse import parse_qs

    headers = headers or {}
    cookies = SimpleCookie(headers.get("Cookie", ""))
    arguments = {k: [v.encode() for v in vs] for k, vs in parse_qs(query).items()}
    return SimpleNamespace(
        method=method, headers=headers, cookies=cookies, query_arguments=arguments
    )


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (request(), "refuse"),
        (request(query="token=wrong"), "refuse"),
        (request(query=f"token={TOKEN}x"), "refuse"),
        (request(query=f"token={TOKEN}"), "link"),
        (request("HEAD", query=f"token={TOKEN}"), "link"),
        (request("POST", query=f"token={TOKEN}"), "pass"),
        (request(headers={"Authorization": f"token {TOKEN}"}), "pass"),
        (request(headers={"Authorization": f"Token  {TOKEN} "}), "pass"),
        (request(headers={"Authorization": f"Bearer {TOKEN}"}), "refuse"),
        (request(headers={"Authorization": "token nope"}), "refuse"),
        (request(headers={"Cookie": f"{cookie_name(TOKEN)}={TOKEN}"}), "pass"),
        (request(headers={"Cookie": f"{cookie_name(TOKEN)}=nope"}), "refuse"),
        # Another run's cookie (its own name) does not open this one.
        (request(headers={"Cookie": f"{cookie_name('other')}={TOKEN}"}), "refuse"),
        (request("PUT", headers={"Upgrade": "websocket"}), "refuse"),
    ],
)
def test_only_requests_with_the_token_get_through(req: Any, expected: str) -> None:
    assert verdict(req, TOKEN) == expected


def test_a_link_with_the_token_sends_on_without_it() -> None:
    assert without_token(f"/status?token={TOKEN}") == "/status"
    assert without_token(f"/info/main/workers.html?a=1&token={TOKEN}&b=") == (
        "/info/main/workers.html?a=1&b="
    )
    assert without_token("?token=x") == "/"


def test_cookie_names_differ_between_runs_and_show_nothing_of_the_token() -> None:
    name = cookie_name(TOKEN)
    assert name.startswith("dask-slurm-") and TOKEN not in name
    assert cookie_name("another") != name


def test_the_token_file(tmp_path: Path) -> None:
    assert read_token({}) is None  # a run without one (--dask-slurm-insecure)
    path = tmp_path / "http-token"
    path.write_text(f"{TOKEN}\n")
    assert read_token({TOKEN_FILE_VARIABLE: str(path)}) == TOKEN
    path.write_text("")
    with pytest.raises(TokenUnreadable, match="is empty; start the run again"):
        read_token({TOKEN_FILE_VARIABLE: str(path)})
    path.unlink()
    with pytest.raises(TokenUnreadable) as e:
        read_token({TOKEN_FILE_VARIABLE: str(path)})
    assert f"cannot read this run's HTTP token from {path} (No such file" in str(e.value)
    assert "does not start without it" in str(e.value)


def test_the_dashboard_line_says_where_the_link_with_the_token_is() -> None:
    assert token_note("/r/tls-h-1/dashboard-link", shown=False) == (
        "; its pages answer only with this run's token: the link with it is in "
        "/r/tls-h-1/dashboard-link (only you can read it)"
    )
    shown = token_note("/r/tls-h-1/dashboard-link", shown=True)
    assert "printed above, not in Snakemake's log file, and kept in /r/" in shown
    assert "could not be written" in token_note(None, shown=False)
    link = dashboard_hint(41234, "127.0.0.1", "n1", "login1", "unused", query="?token=T")
    assert "http://127.0.0.1:41234/status?token=T on n1" in link
    assert link.endswith("then open http://localhost:41234/status?token=T")
    public = dashboard_hint(8787, "", "n1", None, "http://10.0.0.1:8787/status", True, "", True)
    assert "every interface: anyone who can reach that port can ask" in public
    assert "plain HTTP carries the token readable across the network" in public


def test_stderr_is_private_only_as_a_terminal_or_a_file_nobody_else_reads(
    tmp_path: Path,
) -> None:
    private, shared = tmp_path / "private.out", tmp_path / "shared.out"
    with private.open("w") as a, shared.open("w") as b:
        private.chmod(0o600)
        shared.chmod(0o644)
        assert private_stream(a) and not private_stream(b)
        private.chmod(0o640)  # the group: other users too
        assert not private_stream(a)
    read, write = os.pipe()
    with os.fdopen(read) as r, os.fdopen(write, "w") as w:
        assert not private_stream(w) and not private_stream(r)  # a pipe may end anywhere
    with open(os.devnull, "w") as null:
        assert not private_stream(null)  # a device everyone reads
    assert not private_stream(io.StringIO())  # no file at all


def test_each_run_makes_a_private_token_and_names_only_its_file(tmp_path: Path) -> None:
    from snakemake_executor_plugin_dask_slurm.clusters.security import PlainTcp, RunCredentials

    security = RunCredentials(tmp_path / "tls-h-1")
    security.prepare()
    try:
        token = security.http_token()
        assert token and len(token) >= 43  # 32 random bytes, URL-safe base64
        assert (security.token_file.stat().st_mode & 0o777) == 0o600
        assert (TOKEN_FILE_VARIABLE, str(security.token_file)) in security.env()
        assert all(token not in value for _, value in security.env())
        kept = security.keep_link(f"http://127.0.0.1:1/status?token={token}")
        assert kept == security.link_file and (kept.stat().st_mode & 0o777) == 0o600
        again = RunCredentials(tmp_path / "tls-h-2")
        again.prepare()
        assert again.http_token() != token  # a new one every run
        again.close()
    finally:
        security.close()
    assert security.http_token() is None and not security.directory.exists()
    assert PlainTcp().http_token() is None and PlainTcp().keep_link("x") is None


def test_a_server_without_the_check_is_stopped_rather_than_left_open() -> None:
    from snakemake_executor_plugin_dask_slurm.worker.http_guard import GUARD_ATTRIBUTE, enforce

    stopped: list[bool] = []
    http_server = SimpleNamespace(stop=lambda: stopped.append(True))
    unchecked = SimpleNamespace(http_application=object(), http_server=http_server)
    checked = SimpleNamespace(
        http_application=SimpleNamespace(**{GUARD_ATTRIBUTE: True}), http_server=http_server
    )
    env = {TOKEN_FILE_VARIABLE: "/run/tls-h-1/http-token"}
    assert enforce(checked, env) is None and enforce(unchecked, {}) is None
    assert stopped == []
    said = enforce(unchecked, env)
    assert stopped == [True]
    assert said and "was stopped rather than left open to every user of the host" in said

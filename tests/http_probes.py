"""HTTP requests against a run's Dask servers, as another user (``nobody``, through
``runuser``, optionally in a node's network namespace) and as the owner with the printed
link (a cookie session, as a browser keeps one); and the hunt for the token in command
lines, environments and files others can read.

The other user's requests are ``curl`` (``/usr/bin``, which ``nobody`` can run: the
test's own interpreter may live where ``nobody`` cannot read); the owner's are
``http.client`` in this process.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import ssl
import stat
import subprocess
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

#: Every kind of page a Dask HTTP server has, and one it has not.
PATHS = (
    "/status",
    "/info/main/workers.html",
    "/json/identity.json",
    "/metrics",
    "/health",
    "/sitemap.json",
    "/statics/css/base.css",
    "/no/such/page",
)
#: A websocket's upgrade (Bokeh's ``/status/ws``), as a browser sends it.
WEBSOCKET = (
    "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
    "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
)  # fmt: skip
OTHER_USER = "nobody"


def as_other_user(argv: Sequence[str], netns: str | None = None) -> list[str]:
    """``argv`` run as :data:`OTHER_USER` (in ``netns``, a node of the test cluster)."""
    user = ["runuser", "-u", OTHER_USER, "--", *argv]
    return ["ip", "netns", "exec", netns, *user] if netns else user


def other_user_statuses(
    host: str, ports: Iterable[int], netns: str | None = None
) -> dict[str, str]:
    """``{"port path": HTTP status}`` (``000``: no HTTP answer) of every :data:`PATHS`
    and the websocket, on every port, as another user; one ``curl`` for all of them."""
    argv = ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}\\n"]
    labels: list[str] = []
    urls: list[str] = []
    for port in ports:
        for path in PATHS:
            labels.append(f"{port} {path}")
            urls += ([] if not urls else ["--next", *argv[1:]]) + [f"http://{host}:{port}{path}"]
        labels.append(f"{port} websocket")
        urls += ["--next", *argv[1:], *WEBSOCKET, f"http://{host}:{port}/status/ws"]
    done = subprocess.run(
        as_other_user([*argv, *urls], netns), capture_output=True, text=True, timeout=120
    )
    codes = done.stdout.split()
    assert len(codes) == len(labels), (done.stdout, done.stderr)
    return dict(zip(labels, codes, strict=True))


class OwnerSession:
    """The owner's browser, reduced: one host and port, the cookies it was given."""

    def __init__(self, host: str, port: int, https: bool = False) -> None:
        self.host, self.port, self.https = host, port, https
        self.cookies: dict[str, str] = {}
        self.set_cookies: list[str] = []

    def get(self, target: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(status, Location, body) of one GET, sending the cookies kept so far."""
        return self.request("GET", target, headers)

    def request(
        self, method: str, target: str, headers: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        """(status, Location, body) of one request (a small body with POST, PUT, PATCH)."""
        conn = (
            http.client.HTTPSConnection(
                self.host, self.port, timeout=60, context=ssl._create_unverified_context()
            )
            if self.https
            else http.client.HTTPConnection(self.host, self.port, timeout=60)
        )
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        payload = b'{"a": 1}' if method in ("POST", "PUT", "PATCH") else None
        try:
            conn.request(method, target, body=payload, headers=sent)
            answer = conn.getresponse()
            body = answer.read().decode(errors="replace")
        finally:
            conn.close()
        for header in answer.headers.get_all("Set-Cookie") or []:
            self.set_cookies.append(header)
            name, _, value = header.split(";", 1)[0].partition("=")
            self.cookies[name.strip()] = value.strip()
        return answer.status, answer.headers.get("Location", ""), body

    def upgrade(self, target: str) -> int:
        """The status a websocket's upgrade to ``target`` gets (101: accepted)."""
        lines = [f"GET {target} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [WEBSOCKET[i + 1] for i in range(0, len(WEBSOCKET), 2)]
        if self.cookies:
            lines.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        with socket.create_connection((self.host, self.port), timeout=30) as conn:
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            status_line = conn.makefile("rb").readline().decode()
        return int(status_line.split()[1])

    def follow(self, target: str, hops: int = 5) -> tuple[int, str]:
        """GET ``target`` and follow redirects (as a browser does): (status, body)."""
        for _ in range(hops):
            status, location, body = self.get(target)
            if status not in (301, 302, 303, 307) or not location:
                return status, body
            target = urllib.parse.urljoin(target, location)
        raise AssertionError(f"more than {hops} redirects from {target}")


def page_resources(body: str) -> list[str]:
    """The scripts and stylesheets a dashboard page loads, as absolute paths."""
    found = re.findall(r'(?:src|href)="([^"]+\.(?:js|css)[^"]*)"', body)
    return [urllib.parse.urljoin("/status", path) for path in found if "://" not in path]


def readable_by_others(root: Path) -> list[Path]:
    """Every file under ``root`` that another user could read: readable by group or
    others, in directories all of which (up to ``root``) they may enter."""
    found = []
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        if here != root and not here.stat().st_mode & 0o011:
            dirs.clear()  # nobody else gets in below
            continue
        for name in files:
            path = here / name
            with_mode = path.lstat()
            if stat.S_ISREG(with_mode.st_mode) and with_mode.st_mode & 0o044:
                found.append(path)
    return found


def holding(paths: Iterable[Path], secret: str) -> list[Path]:
    """Those of ``paths`` whose content holds ``secret``."""
    return [p for p in paths if secret.encode() in p.read_bytes()]

"""Every HTTP request to the run's scheduler and workers carries this run's token, or is
refused with 403.

Dask's HTTP servers (the dashboard, ``/info`` pages with logs, tracebacks and call stacks,
``/json``, ``/metrics``, ``/health``, statics, Bokeh's websockets; the scheduler's and each
worker's) have no login, and loopback is open to every user of a host. So each run makes a
random token (``secrets.token_urlsafe(32)``, in a 0600 file of its 0700 credentials
directory: :mod:`..clusters.security`); the scheduler and the workers are told the file's
path (:data:`TOKEN_FILE_VARIABLE`, never the token), read it in :mod:`.dask_main` before
Dask's command runs, and :func:`install` puts the check in front of every handler of
distributed's ``RoutingApplication``, the tornado application behind each of their HTTP
servers (``ServerNode.start_http_server``): in its ``find_handler``, which tornado calls for
every request once its headers are in, before any handler is chosen, a body is read or a
websocket accepted. Installed on the class before Dask's command creates its servers, it
leaves no moment in which a server answers unchecked; the preloads check that it is there
(:func:`guarded`) and stop a server that has not got it.

A request gets through with the token in any of three ways (Jupyter's scheme):

- ``?token=<token>`` in the link the run prints: the answer sets a cookie
  (:func:`cookie_name`: HttpOnly, SameSite=Strict, path ``/``) and sends the browser back to
  the same address without the token, so it stays out of the address bar, the history and
  Referer headers;
- that cookie, which the browser sends with everything the page loads afterwards
  (statics, Bokeh's websocket ``/status/ws``, the ``/info`` links);
- an ``Authorization: token <token>`` header (scripts, ``curl``).

Anything else gets a 403 with one line and nothing of Dask's, whatever the path, method
or protocol (a websocket's upgrade included), without reading the request's body; the
dashboard's first-visit setup (:mod:`.scheduler_preload`) sits behind the check, so a
refused request never triggers it. Tokens are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The path of the file holding this run's HTTP token (a path, never the token).
TOKEN_FILE_VARIABLE = "DASK_SLURM_HTTP_TOKEN_FILE"
#: The query argument that carries the token in the printed link.
QUERY_ARGUMENT = "token"
#: What a refused request is told (and nothing else).
REFUSED = (
    "403 Forbidden: this Dask server of a Snakemake dask-slurm run answers only with the "
    "run's token; open the dashboard link the run printed (or the file it names)\n"
)
#: Set on distributed's RoutingApplication once the check is installed.
GUARD_ATTRIBUTE = "dask_slurm_token_guard"


class TokenUnreadable(Exception):
    """The token file named in the environment cannot be read."""


def read_token(env: Mapping[str, str] = os.environ) -> str | None:
    """The run's HTTP token from the file :data:`TOKEN_FILE_VARIABLE` names (None: the
    variable is not set: a run without one, ``--dask-slurm-insecure``)."""
    path = env.get(TOKEN_FILE_VARIABLE)
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise TokenUnreadable(
            f"cannot read this run's HTTP token from {path} ({e.strerror or e}): it is made "
            "in the run's credentials directory before the scheduler and the workers start, "
            "and removed when the run ends; this process does not start without it (its "
            "HTTP pages would answer every user of the host). Start the run again; if it "
            "was just started, check that the run directory is on a file system every node "
            "reads (--dask-slurm-run-dir)."
        ) from None
    if not token:
        raise TokenUnreadable(f"this run's HTTP token file {path} is empty; start the run again.")
    return token


def cookie_name(token: str) -> str:
    """The cookie that holds ``token``: named after a hash of it, so that two runs on one
    host (cookies are per host, not per port) do not overwrite each other's."""
    return f"dask-slurm-{hashlib.sha256(token.encode()).hexdigest()[:12]}"


def same(given: str | bytes | None, token: str) -> bool:
    """Whether ``given`` is ``token``, in constant time."""
    if given is None:
        return False
    raw = given if isinstance(given, bytes) else given.encode("utf-8", "replace")
    return hmac.compare_digest(raw, token.encode())


def verdict(request: Any, token: str) -> str:
    """``"pass"`` (the cookie or the header carries the token), ``"link"`` (a GET or HEAD
    with ``?token=`` right: set the cookie) or ``"refuse"``."""
    header = request.headers.get("Authorization", "")
    if header[:6].lower() == "token " and same(header[6:].strip(), token):
        return "pass"
    cookie = request.cookies.get(cookie_name(token))
    if cookie is not None and same(cookie.value, token):
        return "pass"
    given = request.query_arguments.get(QUERY_ARGUMENT)
    if given and same(given[0], token):
        return "link" if request.method in ("GET", "HEAD") else "pass"
    return "refuse"


def without_token(uri: str) -> str:
    """``/status?token=x&a=1`` -> ``/status?a=1``: where a link with the token sends on to."""
    parts = urllib.parse.urlsplit(uri)
    query = [
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if k != QUERY_ARGUMENT
    ]
    return urllib.parse.urlunsplit(("", "", parts.path or "/", urllib.parse.urlencode(query), ""))


def handlers() -> tuple[type, type]:
    """The two handlers the check answers with itself: (refused, link with the token)."""
    from tornado import web

    class EveryMethod(tuple[str, ...]):
        """Every HTTP method: tornado answers one not in SUPPORTED_METHODS with its own 405
        before the refusal's ``prepare``; the refusal is the same 403 for all."""

        def __contains__(self, method: object) -> bool:
            return True

    @web.stream_request_body  # the body of a refused request is never read
    class TokenRefused(web.RequestHandler):
        SUPPORTED_METHODS = EveryMethod()

        def prepare(self) -> None:
            self.set_status(403)
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(REFUSED)

        def data_received(self, chunk: bytes) -> None:
            return None

    class TokenLink(web.RequestHandler):
        def initialize(self, token: str) -> None:
            self.token = token

        def get(self) -> None:
            self.set_cookie(
                cookie_name(self.token), self.token, path="/", httponly=True,
                samesite="Strict", secure=self.request.protocol == "https",
            )  # fmt: skip
            self.redirect(without_token(self.request.uri or "/"))

        head = get

        def _request_summary(self) -> str:  # tornado's access log: the address, not the token
            return f"{self.request.method} {without_token(self.request.uri or '/')}"

    return TokenRefused, TokenLink


def install(token: str) -> None:
    """Put the check in front of every request to every HTTP server of distributed in this
    process (class-wide: before Dask's command makes them)."""
    from distributed.http.routing import RoutingApplication

    if getattr(RoutingApplication, GUARD_ATTRIBUTE, False):
        return
    refused, link = handlers()
    unguarded = RoutingApplication.find_handler

    def find_handler(self: Any, request: Any, **kwargs: Any) -> Any:
        seen = verdict(request, token)
        if seen == "pass":
            return unguarded(self, request, **kwargs)
        if seen == "link":
            return self.get_handler_delegate(request, link, {"token": token})
        return self.get_handler_delegate(request, refused)

    RoutingApplication.find_handler = find_handler  # type: ignore[method-assign]
    setattr(RoutingApplication, GUARD_ATTRIBUTE, True)


def guarded(server: Any) -> bool:
    """Whether ``server``'s (a scheduler's, a worker's) HTTP application has the check."""
    return bool(getattr(getattr(server, "http_application", None), GUARD_ATTRIBUTE, False))


def enforce(server: Any, env: Mapping[str, str] = os.environ) -> str | None:
    """In a preload: a run with a token whose ``server`` has no check (Dask made its HTTP
    server some other way than :func:`install` knows) gets its HTTP server stopped rather
    than left open; what was done, for the log (None: nothing to do)."""
    if not env.get(TOKEN_FILE_VARIABLE) or guarded(server):
        return None
    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()
    return (
        "dask-slurm: this Dask version's HTTP server is not one the token check knows "
        "(distributed.http.routing.RoutingApplication); it was stopped rather than left "
        "open to every user of the host: no dashboard this run. Report this with your "
        "distributed version."
    )

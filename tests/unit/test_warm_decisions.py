"""The warm path's decisions outside Snakemake's process, each pure and tabled: whether a
worker wants a warm process (:mod:`...worker.warm_host`'s restart policy), and whether the
zygote takes a job or a prime (:func:`...warm.tasks.refusal`, one check for both)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.warm.tasks import Command, refusal
from snakemake_executor_plugin_dask_slurm.worker.warm_host import (
    RESTART_LIMIT,
    Restarts,
    Want,
    after_end,
    wanted,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why

pytestmark = pytest.mark.unit

INTERNALS = Cold(Why.INTERNALS_CHANGED, "missing: x")
OFF = Cold(Why.CANNOT_START, "No such file or directory")
OTHER = Cold(Why.OTHER_PYTHON, "/venv/bin/python; the warm process runs /other/python")
DIED = Cold(Why.DIED_TOO_OFTEN, f"{RESTART_LIMIT + 1} times; last: killed by SIGKILL")


@pytest.mark.parametrize(
    ("before", "refused", "after"),
    [
        # it died: started again, up to the limit
        (Restarts(), None, Restarts(1)),
        (Restarts(RESTART_LIMIT - 1), None, Restarts(RESTART_LIMIT)),
        (Restarts(RESTART_LIMIT), None, Restarts(RESTART_LIMIT + 1, DIED)),
        # it could not start (its `failed` message, or no process at all): never again
        (Restarts(), INTERNALS, Restarts(0, INTERNALS)),
        (Restarts(2), OFF, Restarts(2, OFF)),
        # once off, it stays off for its first reason
        (Restarts(0, INTERNALS), None, Restarts(0, INTERNALS)),
        (Restarts(RESTART_LIMIT + 1, DIED), OFF, Restarts(RESTART_LIMIT + 1, DIED)),
    ],
)
def test_a_warm_process_that_ended_is_started_again_until_it_died_too_often(
    before: Restarts, refused: Cold | None, after: Restarts
) -> None:
    assert after_end(before, refused, "killed by SIGKILL") == after


@pytest.mark.parametrize(
    ("state", "running", "want"),
    [
        (Restarts(), None, Want.START),
        (Restarts(2), None, Want.START),
        (Restarts(), "/venv/bin/python", Want.USE),
        (
            Restarts(),
            "/other/python",
            Cold(Why.OTHER_PYTHON, "/venv/bin/python; the warm process runs /other/python"),
        ),
        (Restarts(0, INTERNALS), None, INTERNALS),
        (Restarts(0, INTERNALS), "/venv/bin/python", INTERNALS),
    ],
)
def test_what_a_warm_job_wants_of_its_workers_warm_process(
    state: Restarts, running: str | None, want: Want | Cold
) -> None:
    assert wanted(state, running, "/venv/bin/python") == want


HERE = str(Path(__file__).parent)
OK: dict[str, Any] = {"key": "k", "argv": ["--cores", "1"], "env": [["A", "1"]], "cwd": HERE}
STALE = Cold(Why.SOURCES_CHANGED, "4 times; last: /w/config.yaml")
PARSE = Cold(Why.PARSE_EFFECTS, "wrote /w/x")


@pytest.mark.parametrize(
    ("request_", "command", "why"),
    [
        (OK, None, None),
        (OK, Command(server=7), None),
        ({**OK, "python": sys.executable}, None, None),  # a member names its interpreter
        ({**OK, "cwd": HERE + "/."}, None, None),  # the same directory, spelt otherwise
        ({**OK, "cwd": "/"}, None, Why.OTHER_CWD),
        ({**OK, "python": "/other/python"}, None, Why.OTHER_PYTHON),
        ({**OK, "key": "k" * 600}, None, Why.KEY_TOO_LONG),
        ({**OK, "key": "k" * 600, "marker": "g"}, None, None),  # a member: its group's marker
        ({**OK, "marker": "g" * 600}, None, Why.KEY_TOO_LONG),
        ({**OK, "env": [["DASK_SLURM_JOB", "x"]]}, None, Why.ENV_SETS_MARKER),
        (OK, Command(refused=STALE), Why.SOURCES_CHANGED),
        (OK, Command(refused=PARSE), Why.PARSE_EFFECTS),
        # the request's own reason first: its command is another one's
        ({**OK, "cwd": "/"}, Command(refused=STALE), Why.OTHER_CWD),
    ],
)
def test_the_zygote_refuses_a_job_or_a_prime_for_one_named_reason(
    request_: Any, command: Command | None, why: Why | None
) -> None:
    found = refusal(request_, command, HERE)
    assert (found.why if found is not None else None) is why, found
    if command is not None and command.refused is not None and why is command.refused.why:
        assert found == command.refused  # the server's or the stale count's own Cold, whole

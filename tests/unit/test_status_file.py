"""The status file and command (report/status_file.py, report/status_command.py) and the
progress figures (dispatch/progress.py): pure, or this process's own /proc entry."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.dispatch.progress import (
    Load,
    ProgressCounts,
    Reading,
    figures,
)
from snakemake_executor_plugin_dask_slurm.report.status_command import judge, main, status_path
from snakemake_executor_plugin_dask_slurm.report.status_file import (
    process_start,
    progress_line,
    read_status,
    same_process,
    write_status,
)


def test_the_file_is_replaced_whole_and_for_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_status(path, {"state": "running", "n": 1})
    write_status(path, {"state": "success", "n": 2})
    assert read_status(path) == {"state": "success", "n": 2}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporary left
    path.write_text('{"state": "runn')  # half a file (not ours: ours are replaced whole)
    assert read_status(path) is None


def test_a_pid_is_the_same_process_only_with_its_start_time() -> None:
    me = os.getpid()
    started = process_start(me)
    assert started is not None and same_process(me, started)
    assert not same_process(me, started + 1)  # a reused pid: another start time
    assert process_start(2**22 + 12345) is None  # beyond pid_max: no such process


def counts(ok: int = 0, failed: int = 0, lost: int = 0) -> ProgressCounts:
    c = ProgressCounts()
    ends = [Finished("k", True)] * ok + [Finished("k", False)] * failed
    ends += [Finished("k", False, lost_on=WorkerRef("w", 1))] * lost
    ends += [Finished("k", False, too_late=True)]  # moved: neither failed nor lost
    for finished in ends:
        c.ended(None, finished)  # type: ignore[arg-type]
    return c


def test_figures_from_two_readings() -> None:
    before = Reading(1000.0, 10, 107, 8, Load(2, 8, 8))
    now = Reading(1060.0, 40, 107, 9, Load(2, 8, 6))
    got = figures(now, before, counts(ok=30, failed=1, lost=2), landing_at=2000.0)
    assert got["jobs"] == {
        "done": 40, "total": 107, "running": 6, "waiting": 107 - 40 - 6 - 1, "in_flight": 9,
        "succeeded": 30, "failed": 1, "lost": 2, "stopped": 0,
    }  # fmt: skip
    assert got["rate_per_minute"] == pytest.approx(30.0)
    assert got["eta_seconds"] == pytest.approx(67 / 30 * 60)
    assert got["fits_before_landing"] is True
    assert got["workers"] == {"alive": 2, "slots": 8, "busy_share": 0.75, "worker_jobs": None}
    line = progress_line(got)
    assert line.startswith("40 of 107 jobs done, 6 running, 60 waiting, 1 failed, 2 lost; ")
    assert "30.0 jobs/min; end in ~2 min 14 s, fits before landing; 2 worker(s), 75% of 8" in line


def test_what_ends_while_the_run_stops_was_stopped_not_failed() -> None:
    stopping = False
    c = ProgressCounts(lambda: stopping)
    c.ended(None, Finished("a", False))  # type: ignore[arg-type]
    stopping = True  # (Snakemake cancels the rest after a failure, or on Ctrl-C)
    c.ended(None, Finished("b", False))  # type: ignore[arg-type]
    assert (c.failed, c.stopped) == (1, 1)


def test_running_is_at_most_the_threads() -> None:
    got = figures(Reading(5.0, 0, 30, 20, Load(1, 2, 20)), None, counts(), None)
    assert got["jobs"]["running"] == 2 and got["jobs"]["waiting"] == 28
    assert got["workers"]["busy_share"] == 1.0


def test_figures_without_a_scheduler_answer_or_a_first_reading() -> None:
    got = figures(Reading(5.0, 0, 3, 2, None), None, counts(), None)
    assert got["jobs"]["running"] is None and got["rate_per_minute"] is None
    assert got["eta_seconds"] is None and got["fits_before_landing"] is None
    assert "0 of 3 jobs done" in progress_line(got)


def record(**changes: Any) -> dict[str, Any]:
    data = {"state": "running", "host": "here", "pid": os.getpid(), "updated_at": 1000.0,
            "pid_start": process_start(os.getpid()), "file_every": 5.0}  # fmt: skip
    return {**data, **changes}


@pytest.mark.parametrize(
    ("data", "host", "live", "code", "says"),
    [
        (record(), "here", True, 0, "live (process"),
        (record(pid_start=1), "here", False, 1, "gone without saying how it ended"),
        (record(pid=2**22 + 12345), "here", False, 1, "killed, e.g. with -9"),
        (record(host="login1", updated_at=990.0), "here", True, 0, "live on login1 (its process"),
        (record(host="login1", updated_at=900.0), "here", False, 1, "judged by the file's age"),
        (record(state="success"), "here", False, 0, "the last run ended: success"),
        (record(state="failed"), "here", False, 1, "the last run ended: failed"),
        (record(state="interrupted"), "elsewhere", False, 1, "ended: interrupted"),
    ],
)
def test_judge(data: dict[str, Any], host: str, live: bool, code: int, says: str) -> None:
    verdict = judge(data, host, now=1000.0)
    assert (verdict.live, verdict.code) == (live, code)
    assert says in verdict.how


def test_the_command_without_a_file_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"{tmp_path}/.snakemake/dask-slurm/status.json does not exist" in said
    assert status_path(tmp_path, Path("/r")) == Path("/r/status.json")
    assert status_path(tmp_path, Path("r")) == tmp_path / "r" / "status.json"

"""What a job used, as the worker measures it (``os.wait4``), on real processes."""

from __future__ import annotations

import resource
import shlex
import sys
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.worker.task import run_measured
from snakemake_executor_plugin_dask_slurm.worker.wire import JobFailed, TaskSpec

#: Burns ``sys.argv[1]`` seconds of its own CPU time (not wall time: on a loaded machine
#: the wall time stretches, the CPU time does not).
BURN = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass"
#: Holds ``sys.argv[1]`` MB, written (so resident), for a moment.
HOLD = "import sys, time\nx = b'\\1' * (int(sys.argv[1]) << 20)\ntime.sleep(0.2)"


def spec(tmp_path: Path, script: str, key: str = "k") -> TaskSpec:
    return TaskSpec(
        key, ("/bin/bash", "-c", script), str(tmp_path), (), str(tmp_path / f"{key}.log"), None
    )


def python(code: str, *args: str) -> str:
    return shlex.join([sys.executable, "-c", code, *args])


def test_two_busy_children_count_two_cpu_seconds(tmp_path: Path) -> None:
    burn = python(BURN, "1")
    outcome, usage = run_measured(spec(tmp_path, f"{burn} & {burn} & wait"), worker="w1")
    assert outcome.returncode == 0 and usage is not None
    # Two seconds burnt, plus the start-up of two interpreters and bash.
    assert 2.0 <= usage.cpu < 2.4, usage
    assert usage.worker == "w1" and usage.host == outcome.host
    assert usage.started == outcome.started and usage.wall <= outcome.finished - outcome.started


def test_a_process_holding_200_mb_reports_its_peak_within_10_percent(tmp_path: Path) -> None:
    # 200 MB above this (test) process's own peak, which the kernel counts as the job's
    # floor (see the next test): after other tests this process may itself hold 200 MB.
    floor_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    hold = floor_mb + 200
    _, usage = run_measured(spec(tmp_path, python(HOLD, str(hold))))
    assert usage is not None and usage.rss_exact, usage
    assert abs(usage.max_rss_kb / 1024 - hold) <= hold * 0.1, usage


def test_a_job_smaller_than_its_worker_is_known_only_to_stay_below_it(tmp_path: Path) -> None:
    # The job's first process is forked from this (test) process, whose peak the kernel
    # counts as the job's: a job of a few MB reads as this process's peak, not exactly.
    x = b"\1" * (100 << 20)  # this process's peak is at least 100 MB
    _, usage = run_measured(spec(tmp_path, "/bin/true"))
    del x
    assert usage is not None and not usage.rss_exact
    assert usage.max_rss_kb <= usage.rss_floor_kb and usage.rss_floor_kb >= 100 << 10


def test_a_failed_job_carries_its_usage_and_its_exit_code(tmp_path: Path) -> None:
    with pytest.raises(JobFailed) as failed:
        run_measured(spec(tmp_path, f"{python(BURN, '0.3')}; exit 3"))
    usage = failed.value.usage
    assert failed.value.outcome.returncode == 3
    assert usage is not None and 0.3 <= usage.cpu < 0.6, usage


def test_a_job_killed_by_a_signal_keeps_popens_returncode(tmp_path: Path) -> None:
    with pytest.raises(JobFailed) as failed:
        run_measured(spec(tmp_path, "kill -TERM $$"))
    assert failed.value.outcome.returncode == -15
    assert failed.value.usage is not None


def test_a_background_process_left_running_is_not_counted(tmp_path: Path) -> None:
    # The job's shell exits at once; its child burns on, re-parented, then is killed with
    # the job's process group: its CPU time is nobody's job's (documented).
    _, usage = run_measured(spec(tmp_path, f"{python(BURN, '5')} & sleep 0.3"))
    assert usage is not None and usage.cpu < 0.5, usage

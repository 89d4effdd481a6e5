"""End to end on the embedded local cluster: real Snakemake, real Dask processes."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, Workflow, live_processes
from tests.waiting import eventually, still_running

pytestmark = pytest.mark.e2e

FEATURE_OUTPUTS = {
    "out/shell/plain.txt": "name=plain\n",
    "out/shell/with space.txt": "name=with space\n",
    "out/shell/dollar$sign.txt": "name=dollar$sign\n",
    "out/shell/quote'mark.txt": "name=quote'mark\n",
    "out/params.txt": 'it\'s a "quoted" $HOME value with  two spaces|3\n',
    "out/threads.txt": "threads=2 omp=2 mkl=2 mem=50\n",
    "out/logged.txt": "done\n",
    "logs/logged.log": "to-stdout\nto-stderr\n",
    "out/bench.txt": "benchmarked\n",
    "out/run.txt": "from-run threads=1\n",
    "out/script.txt": "from-script rule=script_directive\n",
    "out/dir_count.txt": "3\n",
    "out/temp_consumer.txt": "temporary-content\n",
    "out/checkpoint_sum.txt": "20\n",
    "out/tmpdir_plain.txt": "scratch_plain scratch_plain\n",
    "out/tmpdir_callable.txt": "scratch_callable\n",
}


def check_features(wf: Workflow) -> None:
    for name, content in FEATURE_OUTPUTS.items():
        assert wf.read(name) == content, name
    env = wf.read("out/env.txt").splitlines()
    assert env == [
        f"pwd={wf.path}",
        "pipefail=pipefail on",
        "nounset=nounset on",
        "tmpdir-exists",
        "omp=1",
    ]
    assert not (wf.path / "out/temp.txt").exists(), "temp() output was not removed"
    bench = wf.read("bench/bench.tsv").splitlines()
    assert bench[0].split("\t")[:2] == ["s", "h:m:s"] and len(bench) == 2


def job_log_path(wf: Workflow, rule: str, name: str = "") -> Path:
    logs = wf.path / ".snakemake/dask-slurm/logs/jobs" / rule
    return (logs / f"{name}.attempt1.log") if name else logs.with_suffix(".attempt1.log")


def job_log(wf: Workflow, rule: str, name: str = "") -> str:
    return job_log_path(wf, rule, name).read_text()


@pytest.mark.workflow("features")
def test_every_rule_kind_direct_way(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "20")
    assert run.returncode == 0, run
    check_features(workflow)
    # Plain shell rules ran directly: they printed nothing, no Snakemake banner either, so
    # they left no job log at all; the benchmark rule and run:/script: rules went the
    # general way.
    assert not job_log_path(workflow, "shell_wildcards", "name_plain").exists()
    assert "Building DAG" in job_log(workflow, "bench")
    assert "Building DAG" in job_log(workflow, "run_directive")
    assert not job_log_path(workflow, "tmpdir_plain").exists()
    assert "Building DAG" in job_log(workflow, "tmpdir_callable")  # evaluated by the job
    assert "dask-slurm: local (no SLURM allocation" in run.output
    assert "the cluster's start, from its launch" not in run.output  # only with --verbose
    # A run that went well leaves no traceback in the scheduler's log (its close used to
    # log a CRITICAL one: its last event sent to the closing client).
    scheduler_log = (workflow.path / ".snakemake/dask-slurm/logs/scheduler.log").read_text()
    assert "Traceback" not in scheduler_log and "CRITICAL" not in scheduler_log, scheduler_log


@pytest.mark.workflow("features")
def test_every_rule_kind_general_way(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "20", "--dask-slurm-no-direct-shell", "--verbose")
    assert run.returncode == 0, run
    check_features(workflow)
    assert "Building DAG" in job_log(workflow, "shell_wildcards", "name_plain")
    # --verbose says how long each step of the cluster's start took (and only --verbose:
    # the direct-way test above runs without it).
    steps = re.search(
        r"dask-slurm: the cluster's start, from its launch: the scheduler's file written "
        r"([\d.]+) s, connected ([\d.]+) s, 1 worker\(s\) registered ([\d.]+) s\n",
        run.output,
    )
    assert steps, run.output
    assert 0 < float(steps[1]) <= float(steps[2]) <= float(steps[3]) < 60, steps[0]


@pytest.mark.workflow("fail")
def test_failing_rule_stops_the_run_with_a_useful_message(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "4")
    assert run.returncode == 1, run
    out = run.output
    assert "rule bad (jobid" in out and "exited with code 3" in out, out
    assert "bad-line-30" in out and "about-to-fail" in out, "log tail missing"
    assert "bad-line-5\n" not in out, "more than the last lines were quoted"
    log = workflow.path / ".snakemake/dask-slurm/logs/jobs/bad.attempt1.log"
    assert f"\n    Full log: {log}\n" in out  # indented like Snakemake's block, absolute
    assert "cluster/cloud log" not in out  # no pointer to a log that does not exist
    assert "Exiting because a job execution failed" in out


@pytest.mark.workflow("fail")
def test_keep_going_finishes_independent_jobs(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "1", "--keep-going")
    assert run.returncode == 1, run
    for i in range(3):
        assert workflow.read(f"out/good{i}.txt") == f"good{i}\n"
    assert "exited with code 3" in run.output


@pytest.mark.workflow("retries")
def test_retries_resubmit_with_the_new_attempts_resources(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "2", "--retries", "2")
    assert run.returncode == 0, run
    assert workflow.read("out/flaky.txt") == "succeeded-with-200\n"
    first = workflow.path / ".snakemake/dask-slurm/logs/jobs/flaky.attempt1.log"
    assert first.read_text() == "attempt-with-100\n"


@pytest.mark.workflow("fail")
def test_command_not_found_is_named(workflow: Workflow) -> None:
    snakefile = workflow.path / "Snakefile"
    snakefile.write_text(
        'rule all:\n    output: "x.txt"\n    shell: "no-such-command-xyz > {output}"\n'
    )
    run = workflow.snakemake("--jobs", "1")
    assert run.returncode == 1
    assert "exited with code 127 (command not found)" in run.output, run


@pytest.mark.workflow("fail")
def test_a_job_that_cannot_be_prepared_fails_alone(workflow: Workflow) -> None:
    # out/2 is a file where job 2 needs a directory: its job.prepare() fails while the
    # other jobs of the same scheduling round are submitted with it.
    (workflow.path / "Snakefile").write_text(
        'rule all:\n    input: expand("out/{i}/x.txt", i=range(5))\n'
        'rule make:\n    output: "out/{i}/x.txt"\n    shell: "echo {wildcards.i} > {output}"\n'
    )
    (workflow.path / "out").mkdir()
    (workflow.path / "out/2").write_text("in the way\n")
    run = workflow.snakemake("--jobs", "unlimited", "--scheduler", "greedy", "--keep-going")
    assert run.returncode == 1, run
    assert "could not be prepared: [Errno 20] Not a directory: 'out/2/x.txt'" in run.output, run
    for i in (0, 1, 3, 4):
        assert workflow.read(f"out/{i}/x.txt") == f"{i}\n"


@pytest.mark.workflow("fail")
def test_a_large_round_with_mixed_requests_runs_every_job(workflow: Workflow) -> None:
    # 150 jobs ready at once: several chunks, two resource requests (threads 1 and 2), and
    # every job's prepare() (here: creating its output directory) done in batches.
    (workflow.path / "Snakefile").write_text(
        'rule all:\n    input: expand("out/{i}/x.txt", i=range(150))\n'
        "rule make:\n"
        '    output: "out/{i}/x.txt"\n'
        "    threads: lambda wildcards: 1 + int(wildcards.i) % 2\n"
        '    shell: "echo {wildcards.i} {threads} > {output}"\n'
    )
    run = workflow.snakemake("--jobs", "unlimited", "--scheduler", "greedy")
    assert run.returncode == 0, run
    for i in range(150):
        assert workflow.read(f"out/{i}/x.txt") == f"{i} {1 + i % 2}\n"
    # Teardown: the retired worker exits by itself; a SIGTERM while it is closing can
    # hang its exit, so none is sent when it does not need one.
    log = workflow.read(".snakemake/dask-slurm/logs/worker-local.log")
    assert "End worker" in log, log
    assert "Received signal" not in log, log


def interrupt_sleepers(
    workflow: Workflow,
    sig: signal.Signals,
    target: Callable[[int], int] = lambda pid: pid,
    count: int = 2,
    *extra: str,
) -> tuple[int, str, float]:
    """Start two long jobs; once both run, send ``sig`` to ``target(snakemake's pid)``.

    Returns Snakemake's exit code, its output, and the seconds it took to exit after that.
    """
    argv = [
        str(VENV_BIN / "snakemake"),
        "--executor",
        "dask-slurm",
        "--jobs",
        str(count + 1),
        *extra,
        "--config",
        f"token={workflow.token}",
        "seconds=60",
        f"count={count}",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=workflow.path,
        env=workflow.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A background child of a non-interactive shell would ignore SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        eventually(
            "two jobs started",
            lambda: len(list(workflow.path.glob("started*"))) >= 2,
            90,
            interval=0.1,
            check=still_running(proc, lambda: proc.communicate()[0]),
        )
        interrupted = time.monotonic()
        os.kill(target(proc.pid), sig)
        output, _ = proc.communicate(timeout=60)
        return proc.returncode, output, time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def rerun_completes(workflow: Workflow) -> None:
    rerun = workflow.snakemake(
        "--jobs", "3", "--config", f"token={workflow.token}", "seconds=0", "count=2"
    )  # fmt: skip
    assert rerun.returncode == 0, rerun
    assert [workflow.read(f"out/slept{i}.txt") for i in range(2)] == ["slept\n"] * 2


@pytest.mark.workflow("sleepers")
def test_ctrl_c_stops_every_process_and_rerun_completes(workflow: Workflow) -> None:
    code, output, took = interrupt_sleepers(workflow, signal.SIGINT)
    assert code != 0, output
    assert took < 30, f"took {took:.1f} s to stop"
    assert not list((workflow.path / "out").glob("slept*.txt"))
    # (the no_leftovers fixture checks that no job or Dask process is left)
    rerun_completes(workflow)


@pytest.mark.workflow("sleepers")
def test_after_ctrl_c_the_report_records_what_the_running_jobs_ran(workflow: Workflow) -> None:
    """Two sleepers run when Ctrl-C comes (a third waits for a CPU): the report records
    them as stopped by the cancel, with where, when and how long they ran and what the
    kernel measured, not as jobs that never started; the waiting one never started."""
    code, output, _ = interrupt_sleepers(
        workflow, signal.SIGINT, lambda pid: pid, 3, "--dask-slurm-cpus", "2"
    )
    assert code != 0, output
    report = workflow.path / ".snakemake/dask-slurm/usage/latest/jobs.tsv"
    with report.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    ran = [r for r in rows if r["outcome"] == "stopped"]
    assert len(ran) == 2, rows
    for r in ran:
        assert r["detail"] == "the workflow was cancelled", r
        assert r["host"] and r["worker"] and r["started"], r
        # (interrupted as soon as both started: a sleeper's CPU, but measured)
        assert float(r["wall_s"]) > 0 and float(r["cpu_s"]) > 0, r
        assert r["max_rss_mb"] or r["rss_at_most_mb"], r
    waiting = [(r["outcome"], r["detail"]) for r in rows if r not in ran]
    assert waiting == [("not-started", "the workflow was cancelled")], rows


@pytest.mark.workflow("sleepers")
def test_sigterm_stops_running_jobs_within_seconds_with_one_message(workflow: Workflow) -> None:
    # SLURM's time limit: SIGTERM, then SIGKILL KillWait (30 s) later. Snakemake alone
    # would wait for the 60 s jobs. Two CPUs, six jobs handed over: two run, four wait.
    code, output, took = interrupt_sleepers(
        workflow, signal.SIGTERM, lambda pid: pid, 6, "--dask-slurm-cpus", "2"
    )
    assert code != 0, output
    assert took < 20, f"took {took:.1f} s to stop"
    closing = re.findall(
        r"SIGTERM received: the run stops; 2 running job\(s\) were stopped \(Snakemake "
        r"removes what they wrote\), (\d+) waiting job\(s\) never started\. Run the same "
        r"command again",
        output,
    )
    assert len(closing) == 1 and int(closing[0]) >= 1, output
    assert "Error in rule" not in output, output
    assert not list((workflow.path / "out").glob("slept*.txt"))
    rerun_completes(workflow)


def local_worker_of(workflow: Workflow) -> Callable[[int], int]:
    def find(_: int) -> int:
        found = [pid for pid, cmd in live_processes("no-token", str(workflow.path))
                 if "distributed.cli.dask_worker" in cmd]  # fmt: skip
        assert len(found) == 1, found
        return found[0]

    return find


@pytest.mark.workflow("sleepers")
def test_the_only_worker_killed_outright_stops_the_run_and_its_jobs(workflow: Workflow) -> None:
    # As when the OOM killer takes the worker: its jobs would live on as orphans. With one
    # worker and no restarts (--dask-slurm-nanny), no worker is left to run them.
    code, output, took = interrupt_sleepers(workflow, signal.SIGKILL, local_worker_of(workflow))
    assert code != 0, output
    assert "the Dask cluster broke: no Dask worker is left" in output, output
    assert re.search(r"local \(pid \d+\) was killed by signal SIGKILL", output), output
    assert output.count("the Dask cluster broke") == 1 and "Error in rule" not in output, output
    assert took < 30, f"took {took:.1f} s"
    # (no_leftovers: the orphaned sleep jobs were ended too)


def test_settings_from_a_profile_and_the_environment(tmp_path: Path, no_leftovers: str) -> None:
    (tmp_path / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    shell: "echo $OMP_NUM_THREADS > {output}"\n'
    )
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(
        "executor: dask-slurm\njobs: 4\ndask-slurm-no-dashboard: true\n"
    )
    env = {**os.environ, "SNAKEMAKE_DASK_SLURM_CPUS": "1"}
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--profile", str(profile)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert (
        "1 worker process(es) x 1 thread(s) on this machine (1 CPUs from --dask-slurm-cpus" in out
    )
    assert "Dask dashboard" not in out
    assert (tmp_path / "a.txt").read_text() == "1\n"


def test_environment_variable_values_are_validated(tmp_path: Path, no_leftovers: str) -> None:
    (tmp_path / "Snakefile").write_text('rule a:\n    output: "a"\n    shell: "touch {output}"\n')
    env = {**os.environ, "SNAKEMAKE_DASK_SLURM_CLUSTER": "pbs"}
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "invalid choice: 'pbs' (choose from 'auto', 'local', 'srun', 'sbatch', 'attach')" in (
        proc.stdout + proc.stderr
    )


#: What the plugin asks of a scheduler it attaches to: never re-run a dead worker's task.
NO_RERUNS = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}


@pytest.mark.workflow("retries")
def test_attach_to_a_scheduler_the_plugin_did_not_start(workflow: Workflow) -> None:
    sched_file = workflow.path / "scheduler.json"
    python = str(VENV_BIN / "python")
    env = workflow.env() | NO_RERUNS
    scheduler = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(sched_file),
         "--host", "127.0.0.1", "--dashboard-address", ":0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
         "--nthreads", "2", "--resources", "cpus=2", "--no-dashboard"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        eventually("the scheduler file", sched_file.exists, 60, 0.1, still_running(scheduler))
        run = workflow.snakemake(
            "--jobs", "2", "--retries", "1", "--dask-slurm-cluster", "attach",
            "--dask-slurm-scheduler-file", str(sched_file),
        )  # fmt: skip
        assert run.returncode == 0, run
        assert workflow.read("out/flaky.txt") == "succeeded-with-200\n"
        # A plain-TCP scheduler works, with the warning, once.
        assert run.output.count("does not use TLS: anyone who can reach it") == 1, run
        time.sleep(1)
        assert scheduler.poll() is None and worker.poll() is None, "attach stopped them"
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(30)


def test_attach_refuses_workers_without_a_cpus_resource(tmp_path: Path, no_leftovers: str) -> None:
    sched_file = tmp_path / "scheduler.json"
    python = str(VENV_BIN / "python")
    scheduler = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(sched_file),
         "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ) | NO_RERUNS,
    )  # fmt: skip
    worker = subprocess.Popen(
        [python, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
         "--nthreads", "1", "--name", "bare", "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    (tmp_path / "Snakefile").write_text('rule a:\n    output: "a"\n    shell: "touch {output}"\n')
    try:
        proc = subprocess.run(
            [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1",
             "--dask-slurm-cluster", "attach", "--dask-slurm-scheduler-file", str(sched_file),
             "--dask-slurm-startup-timeout", "60"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert "Dask workers bare do not advertise a 'cpus' resource" in out, out
        assert "--resources cpus=N" in out
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(30)


def test_srun_outside_an_allocation_fails_fast(tmp_path: Path, no_leftovers: str) -> None:
    (tmp_path / "Snakefile").write_text('rule a:\n    output: "a"\n    shell: "touch {output}"\n')
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    started = time.monotonic()
    proc = subprocess.run(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", "--jobs", "1",
         "--dask-slurm-cluster", "srun"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "needs a SLURM allocation" in proc.stdout + proc.stderr
    assert "salloc" in proc.stdout + proc.stderr
    assert time.monotonic() - started < 30


@pytest.mark.workflow("packing")
def test_jobs_pack_by_cpus_and_never_oversubscribe(workflow: Workflow) -> None:
    run = workflow.snakemake("--jobs", "10", "--dask-slurm-cpus", "2")
    assert run.returncode == 0, run
    spans = []
    for path in (workflow.path / "out").glob("*.txt"):
        threads, start, end = path.read_text().split()
        spans.append((int(threads), float(start), float(end)))
    assert len(spans) == 6
    events = sorted([(s, t) for t, s, _ in spans] + [(e, -t) for t, _, e in spans])
    busy, peak = 0, 0
    for _, delta in events:
        busy += delta
        peak = max(peak, busy)
    assert peak == 2, "never more CPUs busy than the worker has, and packed up to it"
    # Every job went the direct way, and 'rule all' Snakemake runs itself: no warm process
    # was started (none primed for a job that never reaches a worker).
    logs = workflow.path / ".snakemake/dask-slurm/logs"
    assert not list(logs.glob("warm-*.log")), sorted(p.name for p in logs.iterdir())
    assert not (workflow.path / ".snakemake/dask-slurm/warm-prime.json").exists()
    singles = [(s, e) for t, s, e in spans if t == 1]
    assert any(a[0] < b[1] and b[0] < a[1] for a in singles for b in singles if a != b), (
        "single-threaded jobs should run side by side"
    )


@pytest.mark.workflow("sleepers")
def test_a_second_run_in_the_same_directory_stops_at_once_and_leaves_the_first_alone(
    workflow: Workflow,
) -> None:
    """Two runs with --nolock in one directory: the second stops within seconds, naming
    the first and --dask-slurm-run-dir; the first's scheduler file and logs are untouched
    and it completes."""
    args = ["--nolock", "--jobs", "2", "--config", f"token={workflow.token}", "seconds=8"]
    first = subprocess.Popen(
        [str(VENV_BIN / "snakemake"), "--executor", "dask-slurm", *args, "count=2"],
        cwd=workflow.path, env=workflow.env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        logs = workflow.path / ".snakemake/dask-slurm/logs"
        eventually("the first run's jobs started", lambda: list(workflow.path.glob("started*")),
                   90, 0.1, still_running(first))  # fmt: skip
        scheduler_log = (logs / "scheduler.log").read_text()
        began = time.monotonic()
        second = workflow.snakemake(*args, "count=3", "--forcerun", "sleeper", timeout=60)
        assert time.monotonic() - began < 30, second
        assert second.returncode != 0, second
        assert "Another run uses the run directory" in second.output, second
        assert "--dask-slurm-run-dir" in second.output, second
        assert (logs / "scheduler.json").exists(), "the second run removed the first's file"
        assert (logs / "scheduler.log").read_text().startswith(scheduler_log[:200])
        output, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, output
    assert [workflow.read(f"out/slept{i}.txt") for i in range(2)] == ["slept\n"] * 2


def test_the_example_ends_by_saying_where_its_results_are(
    tmp_path: Path, no_leftovers: str
) -> None:
    """example_workflow/ as scripts/example.sh runs it (its own profile): after Snakemake
    says it is done and the plugin where the usage report is, the last lines name the
    results and the report, and both are there."""
    example = Path(__file__).resolve().parents[1] / "example_workflow"
    dest = tmp_path / "example"
    shutil.copytree(example, dest, ignore=shutil.ignore_patterns("results", ".snakemake"))
    run = Workflow(dest, no_leftovers).snakemake()
    assert run.returncode == 0, run.output
    lines = run.output.splitlines()
    done = max(i for i, line in enumerate(lines) if "steps (100%) done" in line)
    results = next(i for i, line in enumerate(lines) if line.startswith("Results: "))
    usage = next(i for i, line in enumerate(lines) if line.startswith("Usage report: "))
    assert done < results < usage, run.output
    assert "results/summary.tsv" in lines[results], lines[results]
    assert len((dest / "results/summary.tsv").read_text().splitlines()) == 21
    report = lines[usage].split()[2]
    assert (dest / report).is_file(), lines[usage]
    profile = lines[usage].split()[-1]
    assert (dest / profile).is_file(), lines[usage]


#: Snakemake's command run in a process whose first exit handler (so the last to run)
#: says how many objects the collector no longer visits.
FROZEN_AT_EXIT = (
    "import atexit, gc, sys;"
    "atexit.register(lambda: print('frozen at exit', gc.get_freeze_count(), file=sys.stderr));"
    "from snakemake.cli import main; main()"
)


#: A Snakefile that leaves a file open for writing, held by a cycle, until the exit.
LEFT_OPEN = """
class Log:
    def __init__(self, path):
        self.f = open(path, "w")
        self.me = self
LOG = Log("top.log")
LOG.f.write("parsed\\n")
onsuccess:
    LOG.f.write("success\\n")
"""


@pytest.mark.parametrize("left_open", [False, True], ids=["plain", "file-left-open"])
def test_snakemakes_process_skips_the_final_collections(
    tmp_path: Path, no_leftovers: str, left_open: bool
) -> None:
    """After a run, Snakemake's process freezes what is alive (after one collection) so
    that the interpreter's final collections pass it by (worker/quick_exit.py; 0.3-0.45 s
    of every run's end, docs/benchmarks.md); the run's records are written as before. Not
    when the workflow left a file open for writing that only those collections would
    close: it gets its end, as under Snakemake's own executor (lost with a freeze)."""
    rules = (
        'rule all:\n    input: "a.txt"\n'
        'rule a:\n    output: "a.txt"\n    shell: "echo a > {output}"\n'
    )
    (tmp_path / "Snakefile").write_text((LEFT_OPEN if left_open else "") + rules)
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", FROZEN_AT_EXIT, "--executor", "dask-slurm", "--jobs", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "DASK_SLURM_TEST_TOKEN": no_leftovers},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frozen = [int(line.split()[-1]) for line in done.stderr.splitlines() if "frozen at" in line]
    assert frozen, done.stderr[-2000:]
    assert (frozen[0] == 0) is left_open and (frozen[0] > 100_000) is not left_open, frozen
    assert (tmp_path / "a.txt").read_text() == "a\n"
    assert "Complete log" in done.stderr
    if left_open:
        assert (tmp_path / "top.log").read_text() == "parsed\nsuccess\n"

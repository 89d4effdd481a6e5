"""The warm path (issue 21): every kind of general-way job gives the same results warm, cold
and with Snakemake's local executor; and its faults are as safe as the cold way's."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.warm.tasks import PRIMING
from snakemake_executor_plugin_dask_slurm.warm.thread_pools import openblas_threads
from snakemake_executor_plugin_dask_slurm.worker.wire import WHY_TEXT, Why
from tests.conftest import VENV_BIN, WORKFLOWS, live_processes

pytestmark = pytest.mark.e2e

SNAKEMAKE = str(VENV_BIN / "snakemake")
#: The line of `raise ValueError("fails on purpose")` in tests/workflows/warm/Snakefile.
FAILS_LINE = next(
    i
    for i, line in enumerate((WORKFLOWS / "warm" / "Snakefile").read_text().splitlines(), 1)
    if "fails on purpose" in line
)
#: Per-run fields of Snakemake's metadata records (job_hash: the job object's hash()).
TIMES = {"starttime", "endtime", "job_hash"}


def run(workdir: Path, token: str, *args: str, timeout: float = 300) -> tuple[int, str]:
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=token)
    env.pop("SLURM_JOB_ID", None)
    done = subprocess.run(
        [SNAKEMAKE, *args], cwd=workdir, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.returncode, done.stdout


def differing(outputs: dict[str, dict[str, bytes]], way: str) -> dict[str, tuple[object, object]]:
    """The files ``way`` wrote otherwise than the local executor: (``way``'s, local's)."""
    mine, local = outputs[way], outputs["local"]
    return {
        name: (mine.get(name), local.get(name))
        for name in sorted(set(mine) | set(local))
        if mine.get(name) != local.get(name)
    }


def files(root: Path) -> dict[str, bytes]:
    found = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in found}


def metadata(workdir: Path) -> dict[str, dict[str, object]]:
    found = {}
    for path in (workdir / ".snakemake" / "metadata").iterdir():
        record = json.loads(path.read_text())
        found[path.name] = {k: v for k, v in record.items() if k not in TIMES}
    return found


@pytest.mark.timeout(600)
def test_every_kind_of_job_gives_the_same_results_warm_cold_and_locally(
    tmp_path: Path, no_leftovers: str
) -> None:
    ways = {
        "local": ("--cores", "2"),
        "cold": ("--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-no-warm"),
        "warm": ("--executor", "dask-slurm", "--jobs", "4"),
    }
    said = {}
    for way, args in ways.items():
        shutil.copytree(WORKFLOWS / "warm", tmp_path / way)
        code, said[way] = run(tmp_path / way, no_leftovers, *args, "--keep-going")
        # `fails` fails; everything else succeeds (`retried` at its second attempt)
        assert code == 1, f"{way}:\n{said[way]}"
        assert "fails on purpose" in said[way] and f"line {FAILS_LINE}" in said[way], said[way]
    outputs = {way: files(tmp_path / way / "out") for way in ways}
    assert outputs["warm"] == outputs["local"], (differing(outputs, "warm"), said["warm"])
    assert outputs["cold"] == outputs["local"], (differing(outputs, "cold"), said["cold"])
    # 4 run: and their logs, script: and its log, wrapper, bench, shadow, retried, group a, b,
    # c, the scripts inspect, threaded, blas and unclosed (2), blas_run, the logs of
    # fails_script and exits_script (full_script fails: its output is removed)
    assert len(outputs["local"]) == 25, sorted(outputs["local"])
    assert outputs["local"]["unclosed.txt"] == b"written, never closed\n" * 3
    assert gzip.decompress(outputs["local"]["unclosed.gz"]) == b"compressed, never closed\n"
    assert "full.txt" not in outputs["local"]
    # numpy's thread pool as `threads: 1` sizes it, not as the warm process's was (on a
    # machine of 2 CPUs or more, where the two differ)
    assert outputs["local"]["blas.txt"] == b"openblas threads [1]; the process has 1 thread(s)\n"
    # and a run: block's (in the job's own Snakemake) as that process's environment sizes
    # it, not as the warm process loaded it (one thread; its primed server resizes it):
    # warm == cold == local above; here, that this machine tells the two apart
    cpus = len(os.sched_getaffinity(0))
    if openblas_threads(os.environ, cpus) > 1:
        assert not outputs["local"]["blas_run.txt"].startswith(b"openblas threads [1]")
    assert outputs["local"]["group_c.txt"] == b"a 1\nb\nc True\n"
    assert outputs["local"]["threaded.txt"] == b"written by the thread; daemon forked True\n"
    check_scripts(tmp_path, ways, said)
    assert outputs["local"]["retried.txt"] == b"mem_mb=200\n"
    assert outputs["local"]["shadow.txt"] == b"True True\n"
    headers = {way: (tmp_path / way / "bench/run.tsv").read_text().splitlines() for way in ways}
    assert len({lines[0] for lines in headers.values()}) == 1, headers
    assert all(len(lines) == 2 for lines in headers.values()), headers
    for way in ways:
        assert not (tmp_path / way / "scratch.txt").exists(), f"{way}: shadow leaked"
    assert metadata(tmp_path / "warm") == metadata(tmp_path / "cold")
    # the warm run went the warm way; the cold one says why it did not
    assert "went the cold way" not in said["warm"], said["warm"]
    off = "because the warm path is turned off (--dask-slurm-no-warm)"
    assert off in said["cold"], said["cold"]
    warm_logs = list((tmp_path / "warm/.snakemake/dask-slurm/logs").glob("warm-*.log"))
    assert warm_logs
    # every worker's warm process parsed the workflow at the worker's start, before the
    # first warm job came (executor/run.py launch; warm/zygote.py prime)
    assert all(log.read_text().count(PRIMING) == 1 for log in warm_logs), warm_logs
    # local mode started its worker (and so its warm process) before the cluster's plan,
    # and the launch used it (clusters/early.py); the cold run started none early
    details = {w: tmp_path / w / ".snakemake/dask-slurm/logs/plugin.log" for w in ("warm", "cold")}
    early_line = "local: started before the plan, its options sent at the launch"
    assert early_line in details["warm"].read_text(), details["warm"].read_text()
    assert "started before the plan" not in details["cold"].read_text()
    # the group job's usage counts its run: member's 0.5 s of CPU, warm (the member is the
    # zygote's fork, not the group job's) as cold (its own Snakemake's child)
    for way in ("warm", "cold"):
        jobs = tmp_path / way / ".snakemake/dask-slurm/usage/latest/jobs.tsv"
        header, *rows = (line.split("\t") for line in jobs.read_text().splitlines())
        groups = [dict(zip(header, row, strict=True)) for row in rows if row[0][:6] == "group "]
        assert len(groups) == 1 and float(groups[0]["cpu_s"]) >= 0.5, (way, groups)


def test_a_run_job_whose_final_flush_fails_fails_warm_as_cold(
    tmp_path: Path, no_leftovers: str
) -> None:
    """A ``run:`` job writes its output, then its stdout to a full disk: its process's
    final flush fails, so ``python -m snakemake`` exits 120 and the job fails, its output
    removed; the warm way's forked process ends the same way (it exited 0 and the output
    was accepted before warm/child.py and warm/script.py shared one ending)."""
    logs = {}
    for way, extra in (("warm", ()), ("cold", ("--dask-slurm-no-warm",))):
        workdir = tmp_path / way
        shutil.copytree(WORKFLOWS / "full_disk", workdir)
        args = ("--executor", "dask-slurm", "--jobs", "2", "--dask-slurm-no-usage-report")
        code, said = run(workdir, no_leftovers, *args, *extra)
        assert code == 1 and "Error in rule full_run" in said, f"{way}:\n{said}"
        assert not (workdir / "out/full_run.txt").exists(), f"{way}: the output was kept"
        assert ("went the cold way" in said) == (way == "cold"), said
        log = next((workdir / ".snakemake/dask-slurm/logs/jobs").glob("full_run.*")).read_text()
        logs[way] = [line for line in log.splitlines() if line.strip()][-2:]
    assert logs["warm"] == logs["cold"], logs
    assert logs["cold"][0].startswith("Exception ignored in: <_io.TextIOWrapper name='/dev/full'")
    assert logs["cold"][1] == "OSError: [Errno 28] No space left on device"


def script_failures(text: str) -> list[tuple[str, str]]:
    """(the generated script's name, the exit status) of each failed script's command."""
    found = re.findall(
        r"Command 'set -euo pipefail;  (\S+) \S+/\.snakemake/scripts/tmp\w+\.(\w+\.py)' "
        r"returned non-zero exit status (\d+)\.",
        text,
    )
    assert {python for python, _, _ in found} == {str(VENV_BIN / "python")}, found
    return sorted({(name, status) for _, name, status in found})


def traceback_of(text: str) -> list[str]:
    """The failed script's traceback, its generated file's random name left out."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Traceback"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("ValueError"))
    return [re.sub(r"/\S+/tmp\w+\.", "SCRIPTS/tmp.", line) for line in lines[start : end + 1]]


def check_scripts(tmp_path: Path, ways: dict[str, tuple[str, ...]], said: dict[str, str]) -> None:
    """Python scripts: the same failures the same way, and warm in a process forked from
    the zygote with the environment a cold job's script gets."""
    expected = [("exits.py", "3"), ("fails.py", "1"), ("full.py", "120")]
    for way in ways:
        assert script_failures(said[way]) == expected, said[way]
    logs = {
        way: {
            rule: next(
                (tmp_path / way / ".snakemake/dask-slurm/logs/jobs").glob(f"{rule}.*")
            ).read_text()
            for rule in ("fails_script", "exits_script", "inspect")
        }
        for way in ("warm", "cold")
    }
    failed = traceback_of(said["local"])
    assert failed[-1] == "ValueError: script fails on purpose" and len(failed) == 6, failed
    for way in ("warm", "cold"):
        assert traceback_of(logs[way]["fails_script"]) == failed, logs[way]["fails_script"]
        assert "exiting on stdout" in logs[way]["exits_script"]
        assert "inspect says hello on stdout" in logs[way]["inspect"]
    proof = {way: json.loads((tmp_path / way / "proof/inspect.json").read_text()) for way in ways}
    assert "warm.zygote" in proof["warm"]["parent"], proof["warm"]["parent"]  # the fast path
    assert all("warm.zygote" not in proof[way]["parent"] for way in ("cold", "local"))

    def environment(way: str) -> dict[str, str]:
        per_run = {
            "DASK_SLURM_JOB", "DASK_SLURM_OWNER_PID", "__DASK_PARENT_PID",
            "DASK_SLURM_HTTP_TOKEN_FILE",  # the run's credentials directory names its pid
        }  # fmt: skip
        env = proof[way]["env"]
        # a per-run variable's value differs, but not whether it is there
        return {
            k: "per run" if k in per_run else v.replace(str(tmp_path / way), "WD")
            for k, v in env.items()
        }

    assert environment("warm") == environment("cold")
    for way in ("warm", "cold"):  # the script's CPU is its job's (a zygote's child, warm)
        jobs = tmp_path / way / ".snakemake/dask-slurm/usage/latest/jobs.tsv"
        header, *rows = (line.split("\t") for line in jobs.read_text().splitlines())
        threaded = [dict(zip(header, r, strict=True)) for r in rows if r[0].startswith("threaded")]
        assert len(threaded) == 1 and float(threaded[0]["cpu_s"]) >= 0.5, (way, threaded)


def warm_processes(workdir: Path) -> list[int]:
    """The zygote of this workflow's worker (servers and jobs are forks: other parents)."""
    found = []
    for pid, cmd in live_processes("no-token", str(workdir)):
        if "warm.zygote" in cmd:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                if b"warm.zygote" not in f.read():
                    found.append(pid)
    return found


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.timeout(300)
def test_faults_of_the_warm_path_are_as_safe_as_the_cold_way(
    tmp_path: Path, no_leftovers: str
) -> None:
    workdir = tmp_path / "wf"
    shutil.copytree(WORKFLOWS / "warm_faults", workdir)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers)
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.Popen(
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-cpus", "4",
         *FAULTS_ARGS, f"token={no_leftovers}"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output = drive_faults(workdir, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check_faults(workdir, proc.returncode, output)


#: Snakemake's arguments for the warm_faults workflow (then the token's value).
FAULTS_ARGS = ("--keep-going", "--config")


def drive_faults(workdir: Path, proc: subprocess.Popen[str]) -> str:
    """Edit the workflow's sources while `gate` runs, kill the warm processes under
    `victim`, check the daemon of `threads`; Snakemake's output."""
    from tests.appenders import sleeping_in

    # The workflow's sources change while `gate` runs; `edited`, after it, sees what a
    # cold job would: the config file and the module imported by the Snakefile as they
    # are now, the Snakefile as the run began (Snakemake's jobs parse the copy in the
    # runtime source cache that the main process made at its start).
    wait_for(workdir / "gate.started", proc)
    snakefile = workdir / "Snakefile"
    snakefile.write_text(snakefile.read_text().replace('VALUE = "old"', 'VALUE = "new"'))
    (workdir / "config.yaml").write_text("value: new\n")
    (workdir / "helper.py").write_text('MODULE_VALUE = "new"\n')
    (workdir / "go").touch()
    # The warm processes are killed under `victim` and `script_victim` (while its script
    # runs, in a process forked from the zygote): each copy ends, then each runs cold.
    wait_for(workdir / "events.log", proc)
    wait_for(workdir / "script_events.log", proc)
    zygotes = warm_processes(workdir)
    assert zygotes, "no warm process"
    for zygote in zygotes:
        os.kill(zygote, signal.SIGKILL)
    # `threads` ended (its thread first): its daemon ends with it (the worker looks for
    # orphans of finished jobs every second)
    wait_for(workdir / "out/threads.txt", proc)
    deadline = time.monotonic() + 5
    while sleeping_in(workdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sleeping_in(workdir), "the daemon of a finished warm job is alive"
    output, _ = proc.communicate(timeout=180)
    return output


def check_faults(workdir: Path, code: int | None, output: str) -> None:
    assert code == 1, output  # segv failed
    assert (workdir / "out/edited.txt").read_text() == "old new new\n", output
    for victim, events in (("victim", "events.log"), ("script_victim", "script_events.log")):
        lines = (workdir / f"out/{victim}.txt").read_text().splitlines()
        pids = {line.split()[1] for line in lines}
        assert len(pids) == 1, lines
        assert [line.split()[0] for line in lines] == list(map(str, range(1, 11)))
        copies: dict[str, list[float]] = {}
        for line in (workdir / events).read_text().splitlines():
            _, pid, _, when = line.split()
            copies.setdefault(pid, []).append(float(when))
        assert len(copies) == 2, copies  # the killed warm copy, then the cold one
        first, second = sorted(copies.values())
        assert max(first) < min(second), f"two copies of {victim} ran at once"
        log = next((workdir / ".snakemake/dask-slurm/logs/jobs").glob(f"{victim}.*.log"))
        assert "running it the cold way" in log.read_text(), victim
    assert WHY_TEXT[Why.LOST_WHILE_RUNNING] in output, output  # (its Cold: worker/task.py)
    assert "rule segv" in output and "was killed by signal SIGSEGV" in output, output
    assert (workdir / "out/thread_side.txt").exists(), "the job ended before its thread"
    assert (workdir / "out/threads.txt").exists()


def warm_servers(workdir: Path) -> list[int]:
    """The primed servers of this workflow's zygote: forks of it (a job's process is a
    fork of a server)."""
    zygotes = set(warm_processes(workdir))
    found = []
    for pid, cmd in live_processes("no-token", str(workdir)):
        if "warm.zygote" in cmd:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) in zygotes:
                    found.append(pid)
    return found


def check_one_copy_at_a_time(workdir: Path, victim: str, events: str) -> None:
    """The victim's output is one copy's, whole; the stopped copy and the cold one never
    ran at once."""
    lines = (workdir / f"out/{victim}.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == list(map(str, range(1, 11))), lines
    assert len({line.split()[1] for line in lines}) == 1, lines
    copies: dict[str, list[float]] = {}
    for line in (workdir / events).read_text().splitlines():
        _, pid, _, when = line.split()
        copies.setdefault(pid, []).append(float(when))
    assert len(copies) == 2, copies  # the warm copy under the stopped process, then cold
    first, second = sorted(copies.values())
    assert max(first) < min(second), f"two copies of {victim} ran at once"


#: The hang bound the test gives the warm side (DASK_SLURM_WARM_HANG_AFTER), in seconds.
HANG_AFTER = 4


@pytest.mark.timeout(300)
def test_a_stopped_zygote_or_primed_server_is_noticed_and_its_jobs_run_again(
    tmp_path: Path, no_leftovers: str
) -> None:
    """SIGSTOP (what a process blocked on a hung filesystem looks like) of the zygote under
    one job, then of the primed server under the next: each is noticed within the bound,
    killed, and its job runs again the cold way, never two copies at once; the run goes on
    warm with a new zygote and completes."""
    workdir = tmp_path / "wf"
    shutil.copytree(WORKFLOWS / "warm_hangs", workdir)
    env = dict(os.environ, DASK_SLURM_TEST_TOKEN=no_leftovers, **HANGS_ENV)
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.Popen(
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "2", "--dask-slurm-cpus", "2",
         "--dask-slurm-no-usage-report"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output, servers = drive_hangs(workdir, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check_hangs(workdir, proc.returncode, output, servers)


#: What the hang tests give the warm side: a hang bound of HANG_AFTER seconds.
HANGS_ENV = {"DASK_SLURM_WARM_HANG_AFTER": str(HANG_AFTER)}


def drive_hangs(workdir: Path, proc: subprocess.Popen[str]) -> tuple[str, list[int]]:
    """Stop the zygote under `victim`, then the primed server under `server_victim`;
    Snakemake's output and the servers stopped."""
    stopped: list[int] = []
    try:
        wait_for(workdir / "events.log", proc)
        zygotes = warm_processes(workdir)
        assert len(zygotes) == 1, zygotes
        os.kill(zygotes[0], signal.SIGSTOP)
        stopped += zygotes
        began = time.monotonic()
        jobs = workdir / ".snakemake/dask-slurm/logs/jobs"
        while not any("has not answered" in p.read_text() for p in jobs.glob("victim.*.log")):
            assert proc.poll() is None, proc.communicate()[0]
            # noticed within the bound and an interval (and a few seconds of a busy machine)
            assert time.monotonic() - began < HANG_AFTER * 1.25 + 10, "the stop went unnoticed"
            time.sleep(0.1)
        wait_for(workdir / "server_events.log", proc)
        servers = warm_servers(workdir)
        assert servers and not set(servers) & set(stopped), servers
        for server in servers:
            os.kill(server, signal.SIGSTOP)
        stopped += servers
        output, _ = proc.communicate(timeout=180)
        return output, servers
    finally:
        for pid in stopped:  # a process SIGKILL missed is then found by no_leftovers
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def check_hangs(workdir: Path, code: int | None, output: str, servers: list[int]) -> None:
    assert code == 0, output
    check_one_copy_at_a_time(workdir, "victim", "events.log")
    check_one_copy_at_a_time(workdir, "server_victim", "server_events.log")
    assert (workdir / "out/after.txt").read_text() == "after\n"
    logs = workdir / ".snakemake/dask-slurm/logs"
    worker_logs = "".join(p.read_text() for p in logs.glob("worker*.log"))  # srun: workers-…
    said = f"has not answered for {HANG_AFTER} s (stopped, or blocked in the kernel)"
    assert said in worker_logs, worker_logs[-3000:]
    warm_logs = "".join(p.read_text() for p in logs.glob("warm-*.log"))
    server_said = f"its warm server (pid {servers[0]}) has not answered for {HANG_AFTER} s"
    assert server_said in warm_logs, warm_logs[-3000:]
    for victim in ("victim", "server_victim"):
        log = next((logs / "jobs").glob(f"{victim}.*.log")).read_text()
        assert "has not answered" in log and "running it the cold way" in log, log

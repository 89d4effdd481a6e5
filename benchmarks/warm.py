"""Benchmarks of the warm path (issue 21): what a general-way job costs on the worker, and
farms of thin `script:` / `run:` rules and a group, against Snakemake's local executor.

    .venv/bin/python benchmarks/warm.py worker [--jobs 40]
    .venv/bin/python benchmarks/warm.py farm --kind script|run [--rules 1000]
        [--ways local,warm,cold]
    .venv/bin/python benchmarks/warm.py group [--repeats 3]
    .venv/bin/python benchmarks/warm.py memory

`worker`: the p50 of one job on the worker side (``worker.task.run_task``, the warm path's
whole round trip: request, fork, Snakemake's main() on the parsed workflow, exit status)
for a `run:` and a `script:` job, next to the script's own interpreter (the generated
script run alone) and the cold way. `farm`: wall time of N thin rules with plain flags:
``snakemake --cores 2`` vs ``snakemake --executor dask-slurm --jobs N`` (warm, or cold with
--dask-slurm-no-warm), and the CPU per job of all the run's processes and of Snakemake's
own. `group`: a group of four 2-s `run:` members on 4 CPUs, the group
task's time on its worker. `memory`: RSS and PSS of the warm processes of one worker while
jobs run (copy-on-write after fork). Every figure is printed with `uptime` (the machine is
shared). It exits 0 whatever the timings are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = str(VENV_BIN / "snakemake")
SCRIPT = 'with open(snakemake.output[0], "w") as f:\n    f.write(snakemake.wildcards.i + "\\n")\n'
SNAKEFILES = {
    "script": 'rule all:\n    input: expand("out/{{i}}.txt", i=range({n}))\n'
    'rule s:\n    output: "out/{{i}}.txt"\n    script: "s.py"\n',
    "run": 'rule all:\n    input: expand("out/{{i}}.txt", i=range({n}))\n'
    'rule r:\n    output: "out/{{i}}.txt"\n    run:\n'
    '        with open(output[0], "w") as f:\n'
    '            f.write(wildcards.i + "\\n")\n',
    # a warm-up job, then two groups (a, b) of four 2-s run: members, one after the other
    "group": 'rule all:\n    input: expand("out/b{{i}}.txt", i=range(4))\n'
    'rule warmup:\n    output: "out/warmup.txt"\n'
    '    run:\n        open(output[0], "w").write("x\\n")\n'
    'rule a:\n    input: "out/warmup.txt"\n    output: "out/a{{i}}.txt"\n    group: "a"\n'
    "    run:\n        import time\n        time.sleep(2)\n"
    '        open(output[0], "w").write("x\\n")\n'
    'rule b:\n    input: expand("out/a{{i}}.txt", i=range(4))\n    output: "out/b{{i}}.txt"\n'
    '    group: "b"\n'
    "    run:\n        import time\n        time.sleep(2)\n"
    '        open(output[0], "w").write("x\\n")\n',
}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def workflow(kind: str, n: int) -> Path:
    where = Path(tempfile.mkdtemp(prefix=f"warm-bench-{kind}-"))
    (where / "Snakefile").write_text(SNAKEFILES[kind].format(n=n))
    (where / "s.py").write_text(SCRIPT)
    return where


def snakemake(where: Path, *args: str, env: dict[str, str] | None = None) -> float:
    began = time.monotonic()
    done = subprocess.run(
        [SNAKEMAKE, *args], cwd=where, env=env, capture_output=True, text=True, timeout=7200
    )
    took = time.monotonic() - began
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"snakemake {' '.join(args)} failed in {where}")
    return took


WAYS = {
    "local": lambda n: ("--cores", "2"),
    "warm": lambda n: ("--executor", "dask-slurm", "--jobs", str(n)),
    "cold": lambda n: ("--executor", "dask-slurm", "--jobs", str(n), "--dask-slurm-no-warm"),
}


def farm(kind: str, n: int, ways: list[str]) -> None:
    for way in ways:
        where = workflow(kind, n)
        try:
            took, cpu, main = measured(where, *WAYS[way](n))
            print(
                f"farm {kind} x{n} {way}: {took:.1f} s; CPU per job {cpu / n * 1000:.0f} ms "
                f"(all processes), of which Snakemake's own process {main / n * 1000:.0f} ms "
                f"({uptime()})",
                flush=True,
            )
        finally:
            shutil.rmtree(where, ignore_errors=True)


def measured(where: Path, *args: str) -> tuple[float, float, float]:
    """One run's wall seconds, the CPU seconds of all its processes (those reaped by their
    parents: Dask's, the warm processes', the jobs'), and of Snakemake's own process (its
    last reading in /proc before it ended, every 0.1 s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    proc = subprocess.Popen(
        [SNAKEMAKE, *args], cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    tick, main = os.sysconf("SC_CLK_TCK"), 0.0
    reader = threading.Thread(target=proc.communicate, daemon=True)  # drains its output
    reader.start()
    while proc.poll() is None:
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            main = (int(fields[11]) + int(fields[12])) / tick
        time.sleep(0.1)
    took = time.monotonic() - began
    reader.join()
    if proc.returncode:
        raise SystemExit(f"snakemake {' '.join(args)} failed in {where}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, main


def job_commands(kind: str, n: int) -> tuple[Path, list[dict[str, object]]]:
    """The general-way task specs of a small workflow, as the plugin builds them."""
    where = workflow(kind, n)
    capture = where / "capture.py"
    out = where / "specs.jsonl"
    capture.write_text(
        "import json, sys, dataclasses\n"
        "from snakemake_executor_plugin_dask_slurm.dispatch import job_commands as jc\n"
        "orig = jc.JobCommandBuilder._draft\n"
        "def draft(self, job, key, *more):\n"
        "    spec, way = orig(self, job, key, *more)\n"
        f"    with open({str(out)!r}, 'a') as f:\n"
        "        f.write(json.dumps(dataclasses.asdict(spec)) + '\\n')\n"
        "    return spec, way\n"
        "jc.JobCommandBuilder._draft = draft\n"
        "from snakemake.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    subprocess.run(
        [sys.executable, str(capture), "--executor", "dask-slurm", "--jobs", "4",
         "--skip-script-cleanup"],
        cwd=where, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    specs = [json.loads(line) for line in out.read_text().splitlines()]
    return where, [s for s in specs if s.get("warm")]


def worker(jobs: int) -> None:
    from snakemake_executor_plugin_dask_slurm.worker import task, warm_host
    from snakemake_executor_plugin_dask_slurm.worker.wire import TaskSpec, WarmSpec

    for kind in ("run", "script"):
        warm_host.HOST.close()  # one warm process per working directory
        warm_host.HOST = warm_host.WarmHost()
        where, specs = job_commands(kind, jobs)
        shutil.rmtree(where / "out")
        os.chdir(where)
        warm, cold = [], []
        for i, raw in enumerate(specs):
            raw["argv"] = tuple(raw["argv"])
            raw["env"] = tuple(map(tuple, raw["env"]))
            w = raw["warm"]
            # --wait-for-files names the main process's temporary directory, gone now
            argv = list(w["argv"])
            at = argv.index("--wait-for-files")
            del argv[at : at + 2]
            cold_argv = list(raw["argv"])  # [python, -m, snakemake, ...]: no shell
            at = cold_argv.index("--wait-for-files")
            del cold_argv[at : at + 2]
            raw["argv"] = tuple(cold_argv)
            raw["warm"] = WarmSpec(
                w["python"], tuple(argv), tuple(map(tuple, w["exports"])), False, w["log_dir"]
            )
            spec = TaskSpec(**raw)
            began = time.perf_counter()
            done = task.run_task(spec)
            warm.append(time.perf_counter() - began)
            assert done.cold is None, done.cold
            if i < 5:  # a few cold ones, for comparison
                cold_spec = TaskSpec(**{**raw, "key": raw["key"] + "-cold", "warm": None})
                began = time.perf_counter()
                task.run_task(cold_spec)
                cold.append(time.perf_counter() - began)
        line = (
            f"worker {kind}: warm p50 {statistics.median(warm[1:]) * 1000:.0f} ms "
            f"(first, with the warm process's start and parse: {warm[0]:.2f} s; "
            f"n={len(warm) - 1}), cold p50 {statistics.median(cold) * 1000:.0f} ms"
        )
        if kind == "script":
            scripts = sorted((where / ".snakemake" / "scripts").glob("*.py"))
            alone = []
            for script in scripts[:jobs]:
                began = time.perf_counter()
                subprocess.run([sys.executable, str(script)], check=True, cwd=where)
                alone.append(time.perf_counter() - began)
            line += f"; the script alone: p50 {statistics.median(alone) * 1000:.0f} ms"
        print(f"{line} ({uptime()})", flush=True)
        os.chdir("/")
        shutil.rmtree(where, ignore_errors=True)


def group(repeats: int) -> None:
    for _ in range(repeats):
        where = workflow("group", 4)
        tasks = where / "tasks"
        env = dict(os.environ, DASK_SLURM_TIMING_TASKS=str(tasks))
        try:
            took = snakemake(
                where, "--executor", "dask-slurm", "--jobs", "4", "--dask-slurm-cpus", "4",
                "--group-components", "a=4", "b=4", env=env,
            )  # fmt: skip
            lines = [line for f in tasks.glob("*.tsv") for line in f.read_text().splitlines()]
            rows = [line.split("\t") for line in lines]
            spans = sorted(
                (float(a), float(b) - float(a)) for key, a, b in rows if key.startswith("group-")
            )
            each = ", ".join(f"{span:.2f} s" for _, span in spans)
            print(
                f"groups of four 2-s run: members on 4 CPUs, after a warm-up job, one after the "
                f"other: each group's task {each} (the first primes a server for its members' "
                f"command); the whole run {took:.1f} s ({uptime()})",
                flush=True,
            )
        finally:
            shutil.rmtree(where, ignore_errors=True)


def _memory(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, USS: its private pages) in kB of one process."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
                fields[parts[0]] = int(parts[1])
    return fields["Rss:"], fields["Pss:"], fields["Private_Clean:"] + fields["Private_Dirty:"]


def memory() -> None:
    where = workflow("run", 1)
    (where / "Snakefile").write_text(
        'rule all:\n    input: expand("out/{i}.txt", i=range(2))\n'
        'rule r:\n    output: "out/{i}.txt"\n    run:\n'
        "        import time\n        time.sleep(8)\n"
        '        open(output[0], "w").write("x\\n")\n'
    )
    proc = subprocess.Popen(
        [SNAKEMAKE, "--executor", "dask-slurm", "--jobs", "2"], cwd=where,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        found: list[tuple[int, int, str]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(found) < 4:
            time.sleep(0.5)
            found = []
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                    ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError):
                    continue
                if b"warm.zygote" in cmd and str(where).encode() in cmd:
                    found.append((int(entry), ppid, ""))
        pids = {pid for pid, _, _ in found}
        rows = []
        for pid, ppid, _ in found:
            role = (
                "job"
                if ppid in pids and any(p == ppid and pp in pids for p, pp, _ in found)
                else ("server" if ppid in pids else "zygote")
            )
            rss, pss, uss = _memory(pid)
            rows.append((role, pid, rss, pss, uss))
        for role, pid, rss, pss, uss in sorted(rows):
            print(
                f"memory {role} {pid}: RSS {rss / 1024:.0f} MB, PSS {pss / 1024:.0f} MB, "
                f"private {uss / 1024:.0f} MB"
            )
        total = sum(pss for _, _, _, pss, _ in rows)
        print(f"memory: warm processes of one worker, PSS total {total / 1024:.0f} MB ({uptime()})")
    finally:
        proc.wait(timeout=300)
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--jobs", type=int, default=40)
    f = sub.add_parser("farm")
    f.add_argument("--kind", choices=("script", "run"), required=True)
    f.add_argument("--rules", type=int, default=1000)
    f.add_argument("--ways", default="local,warm")
    g = sub.add_parser("group")
    g.add_argument("--repeats", type=int, default=3)
    sub.add_parser("memory")
    args = parser.parse_args()
    if args.what == "worker":
        worker(args.jobs)
    elif args.what == "farm":
        farm(args.kind, args.rules, args.ways.split(","))
    elif args.what == "group":
        group(args.repeats)
    else:
        memory()


if __name__ == "__main__":
    main()

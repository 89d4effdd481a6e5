"""Thin shell rules that each load one environment module, against the same rules without
modules, under the plugin and Snakemake's local executor (issue 29).

    .venv/bin/python benchmarks/envmodules.py [--rules 1000] [--repeats 2]

Needs Debian's Lmod (scripts/test.sh installs it as root). The module tree is
tests/lmod.py's, in a temporary directory; the environment is a login shell's with
``module`` exported. Every run is ``--sdm env-modules``, plain flags (``--cores 2`` for the
local executor, ``--jobs 100`` for the plugin), interleaved and the order rotated per
repeat. Prints each run's wall time and CPU (the Snakemake process and all its children),
and the module system's own cost per load (``module purge && module load tool/1.0`` in
bash, alone). A benchmark: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lmod import site_environment  # noqa: E402

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
FARM = """
rule all:
    input: expand("out/{{i}}.txt", i=range({rules}))

rule task:
    output: "out/{{i}}.txt"
{modules}    shell: "echo ${{{{TOOL_VERSION:-none}}}} {{wildcards.i}} > {{output}}"
"""
CONTENDERS = {
    "local": ("--cores", "2"),
    "dask-slurm": ("--executor", "dask-slurm", "--jobs", "100"),
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(workdir: Path, env: dict[str, str], args: tuple[str, ...]) -> tuple[float, float]:
    before, began = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [SNAKEMAKE, "-q", "--sdm", "env-modules", *args], cwd=workdir, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - began, children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"{args} failed in {workdir}:\n{done.stdout[-3000:]}")
    return wall, cpu


def module_load_cost(env: dict[str, str], times: int = 20) -> float:
    """Median seconds of one ``module purge && module load tool/1.0`` in a fresh bash."""
    command = "module purge && MODULES_VERBOSITY=concise module load tool/1.0; true"
    walls = []
    for _ in range(times):
        began = time.perf_counter()
        subprocess.run(["bash", "-c", command], env=env, check=True)
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-envmodules-") as tmp:
        env = site_environment(Path(tmp) / "site")
        env.pop("SLURM_JOB_ID", None)
        load = module_load_cost(env)
        print(f"one module load, alone: {load * 1000:.1f} ms (bash, median of 20)")
        runs = [(m, c) for m in ("modules", "plain") for c in CONTENDERS]
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {r: [] for r in runs}
        for repeat in range(args.repeats):
            shift = repeat % len(runs)
            for modules, contender in runs[shift:] + runs[:shift]:
                workdir = Path(tmp) / f"{modules}-{contender}-{repeat}"
                workdir.mkdir()
                lines = '    envmodules: "tool/1.0"\n' if modules == "modules" else ""
                (workdir / "Snakefile").write_text(FARM.format(rules=args.rules, modules=lines))
                wall, cpu = one_run(workdir, env, CONTENDERS[contender])
                expected = "1.0" if modules == "modules" else "none"
                assert (workdir / "out" / "0.txt").read_text() == f"{expected} 0\n"
                figures[(modules, contender)].append((wall, cpu))
                print(
                    f"repeat {repeat}: {contender:10} {modules:7} {args.rules} rules: "
                    f"{wall:6.1f} s wall, {cpu:6.1f} CPU-s",
                    flush=True,
                )
        print(f"\n| {args.rules} thin shell: rules | wall (median) | CPU (median) | per rule |")
        print("|---|---|---|---|")
        for (modules, contender), found in figures.items():
            wall = statistics.median(w for w, _ in found)
            cpu = statistics.median(c for _, c in found)
            print(
                f"| {contender}, {modules} | {wall:.1f} s | {cpu:.1f} CPU-s | "
                f"{wall / args.rules * 1000:.1f} ms |"
            )
    return 0


if __name__ == "__main__":
    os.environ.pop("SLURM_JOB_ID", None)
    raise SystemExit(main())

"""The package's layering, checked on its source (``ast``), not by review.

- ``worker/`` runs inside Dask's own processes on the nodes (and worker jobs will ship it
  there): it imports only the standard library and itself. The two exceptions are imports
  inside a function, of the framework that hosts it: ``distributed`` (a task run by a
  worker the plugin did not start, which has no preload) and ``tornado`` (the scheduler
  preload's timer).
- ``slurm/`` is SLURM knowledge: it never imports the cluster lifecycle, dispatch, the
  reports or the executor.
- ``clusters/`` and ``dispatch/`` never import each other: only the executor, the glue,
  imports both; nothing imports the executor.
- ``report/`` (what the user is told) imports neither ``clusters/`` nor ``dispatch/``.
- ``warm/`` runs beside each worker, with Snakemake imported (the warm path): of the plugin
  it imports only ``worker/``, ``snakemake_internals/`` and itself, and never Dask, so that
  it starts as fast as Snakemake does.
- ``snakemake_internals/`` (every reach into Snakemake's code) is a leaf: it imports only
  the standard library, Snakemake (inside functions) and itself.
- Snakemake itself (``snakemake``, ``snakemake.*``; not ``snakemake_interface_*``) is
  imported only in ``snakemake_internals/``, at module level or inside functions, except
  by the entry points of :data:`ENTRY_POINTS`.
- Only named modules start processes (import ``subprocess``).
- Importing a worker-side module imports neither Snakemake nor the rest of the plugin.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "snakemake_executor_plugin_dask_slurm"
NAME = PACKAGE.name
#: Imported inside functions of worker/ only, by the framework hosting that code.
WORKER_HOSTED = {"distributed", "tornado"}
#: The only modules that may start processes.
SUBPROCESS_USERS = {
    "slurm/run.py",
    "clusters/process.py",
    "clusters/preflight.py",
    "clusters/worker_jobs/in_job.py",  # what a worker job runs: it starts the job's srun steps
    "worker/supervisor.py",
    "worker/task.py",
    "worker/warm_host.py",  # starts the warm process beside its worker
    "warm/script.py",  # Snakemake's own Popen of a warm job's script: to the zygote, or as is
}
#: What warm/ must never import (the cluster's and the main process's side).
WARM_FORBIDDEN = {"distributed", "dask", "tornado"}
#: The parts of the plugin warm/ may import besides itself (the probe below checks nothing
#: else comes with warm/'s own modules).
WARM_SHARED = ("warm", "worker", "snakemake_internals")
#: What snakemake_internals/ may import besides the standard library and itself.
SNAKEMAKE = ("snakemake", "snakemake_interface_common", "snakemake_interface_executor_plugins")
#: The only imports of Snakemake itself outside snakemake_internals/: (module, what it
#: imports) -> why it is an entry point, not a reach into Snakemake's code.
ENTRY_POINTS = {
    ("dispatch/group_runner.py", "snakemake.cli"): (
        "a group job's own Snakemake: the command the cold way runs is Snakemake's main()"
    ),
}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module name, at module level?) of every import in ``path``."""
    tree = ast.parse(path.read_text())
    package = [NAME, *path.relative_to(PACKAGE).parent.parts]
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module != "__future__":
                found.append((module, id(node) in top))
    return found


def part(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_the_right_way(path: Path) -> None:
    where = part(path)
    for module, at_top in imports(path):
        root = module.split(".")[0]
        inside = module.split(".")[1] if root == NAME and "." in module else None
        if where == "worker":
            allowed = (
                root in sys.stdlib_module_names
                or (root == NAME and inside == "worker")
                or (not at_top and root in WORKER_HOSTED)
            )
            assert allowed, f"worker/{path.name} imports {module}"
        if where == "warm":
            assert root not in WARM_FORBIDDEN, f"warm/{path.name} imports {module}"
            own = root != NAME or inside in WARM_SHARED
            assert own, f"warm/{path.name} imports {module}"
        if where == "snakemake_internals":
            allowed = root in sys.stdlib_module_names or (
                root == NAME and inside == "snakemake_internals"
            )
            allowed = allowed or (root in SNAKEMAKE and not at_top)
            assert allowed, f"snakemake_internals/{path.name} imports {module}"
        if where == "slurm" and root == NAME:
            assert inside not in ("clusters", "dispatch", "report", "executor"), (
                f"slurm/{path.name} imports {module}"
            )
        if where == "clusters" and root == NAME:
            assert inside not in ("dispatch", "executor"), f"{path} imports {module}"
        if where in ("dispatch", "report") and root == NAME:
            assert inside not in ("clusters", "executor"), f"{path} imports {module}"
        if where == "report" and root == NAME:
            assert inside != "dispatch", f"report/{path.name} imports {module}"
        if root == "subprocess":
            assert str(path.relative_to(PACKAGE)) in SUBPROCESS_USERS, (
                f"{path.relative_to(PACKAGE)} imports subprocess"
            )


def snakemake_imports(path: Path) -> list[str]:
    """What ``path`` imports of Snakemake itself (``snakemake``, ``snakemake.*``)."""
    return [m for m, _ in imports(path) if m == "snakemake" or m.startswith("snakemake.")]


OUTSIDE_THE_ROOM = [p for p in modules() if part(p) != "snakemake_internals"]


@pytest.mark.parametrize("path", OUTSIDE_THE_ROOM, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_snakemake_is_imported_only_in_its_room(path: Path) -> None:
    if part(path) == "snakemake_internals":
        return  # the room itself (its own rule: test_imports_point_the_right_way)
    where = str(path.relative_to(PACKAGE))
    for module in snakemake_imports(path):
        assert (where, module) in ENTRY_POINTS, (
            f"{where} imports {module}: Snakemake's code is reached only through "
            "snakemake_internals/ (add a narrow function there), or, for an entry point, "
            "declared in ENTRY_POINTS with its reason"
        )


def test_every_entry_point_is_still_one() -> None:
    """The allow-list holds only imports that exist: a stale entry would hide a new one."""
    for where, module in ENTRY_POINTS:
        assert module in snakemake_imports(PACKAGE / where), (where, module)


def test_the_layering_test_sees_imports() -> None:
    """Guard against a checker that finds nothing and so cannot fail."""
    found = dict(imports(PACKAGE / "worker" / "task.py"))
    assert found[f"{NAME}.worker.logtail"] is True
    assert found["distributed"] is False  # inside run_and_report
    assert ("subprocess", True) in imports(PACKAGE / "slurm" / "run.py")
    room = dict(imports(PACKAGE / "snakemake_internals" / "scheduler.py"))
    assert room["snakemake.scheduling.job_scheduler"] is False  # inside a function
    inside = set(snakemake_imports(PACKAGE / "snakemake_internals" / "cli.py"))
    assert {"snakemake", "snakemake.cli", "snakemake.api"} <= inside  # all inside functions
    # the interface packages are not Snakemake itself
    assert ("snakemake_interface_executor_plugins.utils", False) in imports(
        PACKAGE / "dispatch" / "job_commands.py"
    )
    assert not snakemake_imports(PACKAGE / "dispatch" / "job_commands.py")


def test_a_worker_module_imports_neither_snakemake_nor_the_plugin() -> None:
    worker = f"{NAME}.worker"
    probe = (
        f"import sys, {worker}.task, {worker}.supervisor, {worker}.scheduler_preload, "
        f"{worker}.warm_host;"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"('snakemake', 'snakemake_interface_common', 'distributed', 'dask') "
        f"or (m.startswith('{NAME}.') and not m.startswith('{NAME}.worker')));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_status_command_imports_neither_snakemake_nor_dask() -> None:
    """``python -m ... status`` on a login node: quick, the standard library only."""
    probe = (
        f"import sys, {NAME}.__main__, {NAME}.report.status_command;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('snakemake', 'snakemake_interface_common', 'snakemake_interface_executor_plugins', "
        "'distributed', 'dask', 'tornado'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_warm_process_imports_no_main_side_module_and_no_dask() -> None:
    """Its own modules bring only warm/ and worker/; Snakemake's plugin registry then
    imports every executor plugin (this one's executor too, as `python -m snakemake`
    does), but nothing of Dask, and not the executor's run machinery (the cluster sources,
    the failures, the usage report: imported when a run starts, ~60 ms of every warm
    process's and cold job's start otherwise). And what a job forked from it needs of
    `platform` for Snakemake's log header is there: no `uname -p` per job (a subprocess
    would exit 2)."""
    warm = f"{NAME}.warm"
    probe = (
        f"import sys, {warm}.zygote, {warm}.primed, {warm}.child, {warm}.snakemake_side;"
        f"own = sorted(m for m in sys.modules if m.startswith('{NAME}.') "
        f"and m.split('.')[1] not in {WARM_SHARED!r});"
        f"{warm}.snakemake_side.load();"
        "import platform, subprocess;"
        "subprocess.check_output = lambda *a, **k: sys.exit(2);"
        "platform.platform();"
        "dask = sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'dask'));"
        f"assert '{NAME}.executor.plugin' in sys.modules;"
        f"run = sorted(m for m in sys.modules if m.startswith('{NAME}.') and "
        f"(m.split('.')[1] == 'clusters' or m.startswith(('{NAME}.report.usage', "
        f"'{NAME}.executor.run', '{NAME}.executor.failures', '{NAME}.dispatch.again', "
        f"'{NAME}.dispatch.ends'))));"
        "print(own, dask, run); sys.exit(1 if own or dask or run else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_worker_names_the_warm_modules_the_warm_package_has() -> None:
    from snakemake_executor_plugin_dask_slurm.warm import ZYGOTE_MODULE
    from snakemake_executor_plugin_dask_slurm.worker.warm_host import ZYGOTE_MODULE as NAMED

    assert NAMED == ZYGOTE_MODULE

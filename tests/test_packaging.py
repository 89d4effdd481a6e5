"""The plugin is discovered the way Snakemake discovers plugins, and the code is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tooling

ROOT = Path(__file__).parent.parent
PYTHON = sys.executable
DISCOVER = (
    "from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry as R;"
    "p = R().get_plugin('dask-slurm'); print(p.name, p._executor_settings_cls.__name__)"
)


def test_discovered_from_this_environment() -> None:
    # The test command installs the project editable (hatchling's .pth path entry), the
    # mode docs/further.md documents; Snakemake scans with pkgutil.iter_modules.
    out = subprocess.run([PYTHON, "-c", DISCOVER], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "dask-slurm ExecutorSettings"


def test_discovered_from_a_normal_wheel_install(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(ROOT)],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    package = target / "snakemake_executor_plugin_dask_slurm"
    assert (package / "__init__.py").exists()
    assert (package / "py.typed").exists(), "the wheel must mark the package as typed"
    assert (package / "worker" / "supervisor.py").exists(), "every subpackage is in the wheel"
    assert (target / "bin" / "dask-slurm-status").exists(), "the status command's script"
    for script in ("page.js", "plots.js"):
        assert (package / "report" / "usage" / script).exists(), "report.html's script too"
    # PYTHONPATH comes before the editable install's path entry, so the wheel's copy is
    # the one Snakemake's scan imports.
    code = DISCOVER + "; import snakemake_executor_plugin_dask_slurm as m; print(m.__file__)"
    out = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    discovered, path = out.stdout.splitlines()
    assert discovered == "dask-slurm ExecutorSettings"
    assert path.startswith(str(target))


def test_snakemake_cli_lists_the_settings() -> None:
    snakemake = Path(PYTHON).parent / "snakemake"
    out = subprocess.run([str(snakemake), "--help"], capture_output=True, text=True, check=True)
    assert "--dask-slurm-cluster VALUE" in out.stdout
    assert "'auto': srun inside" in out.stdout
    assert "--dask-slurm-no-direct-shell" in out.stdout
    # argparse shows no default unless the help says it: every numeric one does.
    helps = " ".join(out.stdout.split())
    for flag, default in [
        ("startup-timeout", 120), ("landing-margin", 120), ("worker-ttl", 30),
        ("runtime-margin", 30), ("worker-job-nodes", 1), ("worker-job-idle", 60),
        ("status-interval", 60),
    ]:  # fmt: skip
        said = helps.split(f"--dask-slurm-{flag} VALUE ", 1)[1].split(" [env var:")[0]
        assert f"Default: {default}." in said, (flag, said)


@pytest.mark.parametrize(
    "tool", [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]]
)
def test_code_is_clean(tool: list[str]) -> None:
    exe = Path(PYTHON).parent / tool[0]
    out = subprocess.run([str(exe), *tool[1:]], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_readme_settings_table_matches_the_code() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import settings_table
    finally:
        sys.path.pop(0)
    assert settings_table.block() in (ROOT / "README.md").read_text(), (
        "README settings table is stale: run 'python scripts/settings_table.py --write'"
    )

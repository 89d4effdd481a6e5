"""worker/dask_main.py: Dask's command modules run as ``python -m`` would, without NumPy
(the e2e check of the real scheduler and worker is in tests/test_security.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.worker import DASK_MAIN_MODULE
from snakemake_executor_plugin_dask_slurm.worker.dask_main import NUMPY_VARIABLE

#: A module that says what it was run as and whether NumPy can be imported.
PROBE = """
import sys
try:
    import numpy
    numpy_state = "importable"
except ImportError:
    numpy_state = "blocked"
if __name__ == "__main__":
    print(__name__, sys.argv[0].endswith("probe_mod.py"), sys.argv[1:], numpy_state)
"""


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE, *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path), **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_module_runs_as_main_with_its_arguments_and_without_numpy(tmp_path: Path) -> None:
    pytest.importorskip("numpy")  # installed with the dashboard's Bokeh
    assert run(tmp_path, "probe_mod", "--a", "b") == "__main__ True ['--a', 'b'] blocked"


def test_numpy_stays_importable_when_the_user_says_so(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    out = run(tmp_path, "probe_mod", env={NUMPY_VARIABLE: "1"})
    assert out == "__main__ True [] importable"


def test_without_a_module_it_says_how_it_is_called() -> None:
    done = subprocess.run(
        [sys.executable, "-m", DASK_MAIN_MODULE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"usage: python -m {DASK_MAIN_MODULE} MODULE [ARGS...]"


def test_allow_numpy_lifts_the_block_in_the_process() -> None:
    code = (
        "from snakemake_executor_plugin_dask_slurm.worker import dask_main\n"
        "assert dask_main.block_numpy()\n"
        "try:\n    import numpy\nexcept ImportError:\n    print('blocked')\n"
        "dask_main.allow_numpy()\nimport numpy\nprint('imported', numpy.__name__)\n"
    )
    pytest.importorskip("numpy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["blocked", "imported numpy"], done.stderr

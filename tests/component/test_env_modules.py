"""What the plugin relies on in Snakemake for ``envmodules:`` (issue 29), on the installed
Snakemake: the wrapper is Snakemake's own ``EnvModules.shellcmd``, and ``shell()`` loads a
rule's modules from any process, whatever the paths of its frames.

Snakemake 9.27.1's ``shell()`` skips modules when ``"slurm" in (item.filename for item in
inspect.stack())`` (snakemake/shell.py), meant for the SLURM executor plugins. It is a
membership test of whole file names, so it never matches a real path; this plugin's own
package path holds ``slurm``, and its warm processes and group runner call ``shell()``
with its frames on the stack. A release that turns it into a substring test would turn
modules off on the plugin's warm path and in group jobs: this test fails on it first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snakemake.deployment.env_modules import EnvModules
from snakemake.shell import shell


class Recorded(EnvModules):
    """Snakemake's EnvModules, with a command that needs no module system to show it ran."""

    def __init__(self, marker: Path) -> None:
        super().__init__("tool/1.0")
        self.marker = marker

    def shellcmd(self, cmd: str) -> str:
        wrapped: str = super().shellcmd(cmd)
        assert wrapped.startswith("module purge && ")
        return f"echo loaded > {self.marker}; {cmd}"


def loads_from(path: str, tmp: Path) -> bool:
    """Whether ``shell()`` wraps a rule's command with its modules when called from a
    function whose file is ``path`` (the command itself runs either way)."""
    namespace: dict[str, Any] = {}
    source = "def call(shell, modules, out):\n    shell('echo job > {out}', env_modules=modules)\n"
    exec(compile(source, path, "exec"), namespace)
    marker, out = tmp / "marker", tmp / "out"
    marker.unlink(missing_ok=True)
    namespace["call"](shell, Recorded(marker), str(out))
    assert out.read_text() == "job\n"
    return marker.exists()


def test_shell_loads_modules_from_a_path_that_says_slurm(tmp_path: Path) -> None:
    assert loads_from("/home/u/runs/Snakefile", tmp_path)
    here = "/home/u/slurm-runs/snakemake_executor_plugin_dask_slurm/x.py"
    assert loads_from(here, tmp_path), (
        "Snakemake's shell() now skips envmodules: under paths with 'slurm' (see docstring)"
    )


def test_the_wrapper_is_snakemakes_own() -> None:
    assert EnvModules("a/1", "b/2").shellcmd("true") == (
        "module purge && MODULES_VERBOSITY=concise module load a/1 b/2; true"
    )

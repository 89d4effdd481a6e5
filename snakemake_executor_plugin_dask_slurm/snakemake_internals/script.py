"""Snakemake's scripts (snakemake/script/__init__.py): a warm job's Python ``script:``.

Snakemake runs a Python script with ``PythonScript.execute_script``, which builds the
command and hands it to ``ScriptBase._execute_cmd`` and ``shell()``. A warm process wraps
``execute_script`` (warm/script.py's ``install``) so that only its last step, ``shell()``'s
``subprocess.Popen``, goes to the zygote; this module is what that hook relies on: the
three functions' source (:data:`SCRIPT_HOOK`) and the script object's software
deployment (:func:`software_reason`, through :mod:`.deployment`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .deployment import script_software
from .guard import Touch, digest, mark

__all__ = [
    "SCRIPT_HOOK",
    "TOUCHES",
    "hooked",
    "mark",
    "pip_deployments_path",
    "software_reason",
    "wrap_execute_script",
]


def hooked() -> list[Callable[..., Any]]:
    """What the hook relies on: the functions between ``execute_script`` and ``Popen``."""
    from snakemake.script import PythonScript, ScriptBase
    from snakemake.shell import shell

    return [PythonScript.execute_script, ScriptBase._execute_cmd, shell.__new__]


def pip_deployments_path() -> str | None:
    """Where Snakemake deploys storage plugins with pip (``snakemake.PIP_DEPLOYMENTS_PATH``),
    which its script preamble appends to ``sys.path``; None if it has none."""
    import snakemake

    return getattr(snakemake, "PIP_DEPLOYMENTS_PATH", None) or None


def software_reason(script: Any) -> str | None:
    """Why the script object's software deployment keeps it in ``shell()``, or None."""
    conda, container, modules = script_software(script)
    if container:
        return "it runs in a container"
    if conda:
        return "it runs in a conda environment"
    if modules:
        return "it loads environment modules"
    return None


def wrap_execute_script(make: Callable[[Any], Callable[..., Any]]) -> None:
    """Replace ``PythonScript.execute_script`` by ``make(Snakemake's own)``."""
    from snakemake.script import PythonScript

    original = PythonScript.execute_script
    PythonScript.execute_script = mark(make(original), original)


SCRIPT_HOOK = Touch(
    name="warm script hook",
    kind="hook",
    what=(
        "PythonScript.execute_script, ScriptBase._execute_cmd and shell.__new__ "
        "(snakemake/script/__init__.py, shell.py)"
    ),
    written_for="9.27.1",
    without="warm jobs' Python scripts start a fresh interpreter, as on the cold way",
    found=lambda: digest(hooked()),
    fingerprint="215926de6130ed56bb2e2a5d3d3a0b3e3a3220473b6cd3ce19b631d83115371b",
)
TOUCHES = (SCRIPT_HOOK,)

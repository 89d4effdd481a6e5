"""A real module system for the tests: Debian's Lmod, a small module tree, and the
environment a site's login shell gives (``module`` exported as a bash function).

scripts/test.sh installs Lmod as root (``apt-get install lmod``); elsewhere the tests that
need it are skipped, and under CI they fail instead.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.slurm_cluster.fixtures import must_not_skip

#: Debian's Lmod: its bash start-up file, which defines ``module``.
LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")

#: The modules the tests load, in Lmod's Lua. ``tool/1.0`` and ``tool/2.0`` set a variable
#: and put a program on PATH; ``broken/1.0`` fails to load with Lmod's own error.
MODULES = {
    "tool/1.0.lua": 'setenv("TOOL_VERSION", "1.0")\nprepend_path("PATH", "{root}/bin/tool-1.0")\n',
    "tool/2.0.lua": 'setenv("TOOL_VERSION", "2.0")\nprepend_path("PATH", "{root}/bin/tool-2.0")\n',
    "extra/1.0.lua": 'setenv("EXTRA_VERSION", "1.0")\n',
    "broken/1.0.lua": 'LmodError("broken/1.0 cannot be loaded on this host")\n',
}

#: A function the user's shell exports, besides ``module``.
GREET = 'greet() { echo "hello $1"; }; export -f greet'


def require_lmod() -> None:
    if LMOD_INIT.is_file():
        return
    reason = f"Lmod is not installed ({LMOD_INIT} is missing; scripts/test.sh installs it as root)"
    if must_not_skip(os.environ):
        pytest.fail(f"{reason}; CI forbids skipping", pytrace=False)
    pytest.skip(reason)


def module_tree(root: Path) -> Path:
    """Write the module tree and the modules' programs under ``root``; the MODULEPATH."""
    modules = root / "modulefiles"
    for name, text in MODULES.items():
        path = modules / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{root}", str(root)))
    for version in ("1.0", "2.0"):
        program = root / "bin" / f"tool-{version}" / "tool"
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text(f'#!/bin/sh\necho tool {version} "$@"\n')
        program.chmod(0o755)
    return modules


def site_environment(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a login shell on a site with Lmod: ``module`` and ``greet``
    exported as bash functions, MODULEPATH at the test's tree."""
    require_lmod()
    modulepath = module_tree(root)
    script = (
        f"source {LMOD_INIT} && export -f module && {GREET} && "
        f"export MODULEPATH={modulepath} && env -0"
    )
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        env=dict(base if base is not None else os.environ),
        capture_output=True,
        timeout=30,
        check=True,
    )
    env = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    assert "BASH_FUNC_module%%" in env and "BASH_FUNC_greet%%" in env, sorted(env)
    return env

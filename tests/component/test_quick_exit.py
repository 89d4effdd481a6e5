"""The plugin's Dask processes skip the interpreter's final collections at exit
(worker/quick_exit.py): what is alive then is frozen, so finalization passes it by."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Exit handlers run last registered first: the one registered before at_exit() looks at
# the permanent generation after the freeze.
CHILD = """
import atexit, gc
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
from snakemake_executor_plugin_dask_slurm.worker import quick_exit
{arm}
junk = [[i] for i in range(10000)]
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("arm", "frozen"), [("quick_exit.at_exit()", True), ("", False)])
def test_objects_alive_at_exit_are_frozen_only_when_asked(arm: str, frozen: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(arm=arm)], capture_output=True, text=True, check=True
    )
    count = int(done.stdout.split()[-1])
    assert (count > 10000) is frozen, done.stdout

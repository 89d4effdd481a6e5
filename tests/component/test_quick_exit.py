"""The plugin's Dask processes skip the interpreter's final collections at exit
(worker/quick_exit.py): what is alive then is frozen, so finalization passes it by."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


#: An object with a finalizer that only a garbage cycle holds when the process starts to
#: exit. The interpreter's own teardown reaches it only after the builtins are gone (its
#: `open` fails, ignored); a collection in an exit handler runs it while they are there.
GARBAGE = """
import gc, sys
gc.disable()  # the cycle stays uncollected until exit
from snakemake_executor_plugin_dask_slurm.worker import quick_exit
class Holder:
    def __del__(self):
        with open(sys.argv[1], "w") as f:
            f.write("finalized")
h = Holder()
h.me = h
del h
{arm}
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("arm", "finalized"),
    [
        (
            "import atexit; n = atexit._ncallbacks(); quick_exit.collect_then_skip_at_exit(); "
            "quick_exit.collect_then_skip_at_exit(); assert atexit._ncallbacks() == n + 1",
            True,
        ),
        ("quick_exit.at_exit()", False),  # the Dask processes' bare freeze
        ("", False),  # the interpreter's own exit
    ],
    ids=["snakemake", "dask", "none"],
)
def test_snakemakes_exit_still_finalizes_what_was_garbage(
    arm: str, finalized: bool, tmp_path: Path
) -> None:
    """Snakemake's process collects before it freezes: what is garbage when it starts to
    exit is finalized (asked twice, armed once)."""
    out = tmp_path / "out.txt"
    subprocess.run(
        [sys.executable, "-c", GARBAGE.format(arm=arm), str(out)],
        check=True, timeout=60, capture_output=True,
    )  # fmt: skip
    assert (out.exists() and out.read_text() == "finalized") is finalized


LEFT_OPEN = """
import logging, sys
from snakemake_executor_plugin_dask_slurm.worker import quick_exit
logging.getLogger().addHandler(logging.FileHandler(sys.argv[1] + ".log"))  # logging closes it
read = open("/dev/null")
mine = open(sys.argv[1], "w")
print(sorted(getattr(f, "name", "?") for f in quick_exit.writers_left_open()))
"""


@pytest.mark.timeout(60)
def test_the_files_only_the_final_collections_would_close(tmp_path: Path) -> None:
    """A file the process opened for writing is named (its text layer, its buffer, its raw
    file); the standard streams, logging's handlers' files and files open for reading
    are not."""
    out = tmp_path / "mine.txt"
    done = subprocess.run(
        [sys.executable, "-c", LEFT_OPEN, str(out)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr([str(out)] * 3)


#: A process that arms Snakemake's exit with something alive, and says at its very end
#: (its first exit handler: the last to run) how many objects were frozen.
ALIVE_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
from snakemake_executor_plugin_dask_slurm.worker import quick_exit
{alive}
quick_exit.collect_then_skip_at_exit()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("alive", "env", "frozen"),
    [
        ("", {}, True),
        ("import io; kept = io.StringIO(); kept.write('in memory')", {}, True),
        (  # a dead weak proxy among the objects: the scan must not look at it through it
            "import weakref\nclass T: pass\nt = T(); proxy = weakref.proxy(t); del t",
            {},
            True,
        ),
        (
            "import sqlite3; db = sqlite3.connect(sys.argv[1]); "
            "db.execute('pragma journal_mode=wal'); db.execute('create table t (x)'); "
            "db.execute('insert into t values (1)'); db.commit()",
            {},
            False,
        ),
        ("", {"DASK_SLURM_FULL_EXIT": "1"}, False),
    ],
    ids=["nothing", "in-memory", "dead-proxy", "sqlite", "full-exit"],
)
def test_what_is_alive_at_exit_decides_the_freeze(
    alive: str, env: dict[str, str], frozen: bool, tmp_path: Path
) -> None:
    """In-memory streams and a dead weak proxy leave the freeze on, quietly; an open SQLite
    connection (its close merges the write-ahead log into the database) and
    DASK_SLURM_FULL_EXIT=1 leave the interpreter's own exit."""
    done = subprocess.run(
        [sys.executable, "-c", ALIVE_AT_EXIT.format(alive=alive), str(tmp_path / "w.db")],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert (int(done.stdout.split()[-1]) > 1000) is frozen, done.stdout
    if "sqlite" in alive:  # closed at exit as without the plugin: the log merged
        assert not (tmp_path / "w.db-wal").exists()

"""The thread pools a warm script's process sizes as a fresh interpreter would.

OpenBLAS (numpy's, which Snakemake imports through yte) sizes its thread pool when it
loads, from the environment: a fresh interpreter's from the job's (``threads``, which
Snakemake's shell exports), the zygote's from its own. The zygote loads it with a pool of
one (:func:`loading_with_one_thread`), and :func:`find_pools` finds how to resize its pools,
or why scripts cannot run in it (another runtime that sized a pool at load), kept in its
:class:`.context.ZygoteContext`. A process forked from the zygote sizes them again with
:func:`size_thread_pools` only where its environment asks for another size: a script's
process from the job's environment (``threads: 1``, most jobs: nothing to do), a primed
server from its own (what a job's Snakemake started cold would load, which its job
processes inherit).

Why not load with the zygote's own size and resize every script's process: OpenBLAS's
setter first starts the whole pool again after a fork (its ``goto_set_num_threads``
re-initializes a pool that its at-fork handler ended), every thread of which then polls
for work for about 0.1 s before it sleeps: each ``threads: 1`` script of a farm burned a
busy thread per other CPU for all of its short life (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

#: OpenBLAS (numpy's, which Snakemake imports through yte) sizes its thread pool when it
#: loads, from the environment: a fresh interpreter's from the job's (``threads``, which
#: Snakemake's shell exports), the zygote's from its own. Its setter and getter, by build.
OPENBLAS_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
#: OpenMP runtimes: loaded beside OpenBLAS, a resize would also set every job's OpenMP
#: thread count (an OpenMP build's setter calls ``omp_set_num_threads``).
OPENMP = ("libgomp", "libiomp", "libomp")
#: Other runtimes that size a pool when they load (OpenMP, MKL, BLIS, TBB): with any of
#: them loaded in the zygote, scripts go through the shell (no way to resize each here).
OTHER_POOLS = (*OPENMP, "libmkl", "libblis", "libtbb")


def loaded_libraries(maps: str) -> list[str]:
    """The shared libraries a ``/proc/<pid>/maps`` text names, each once, in order."""
    found: dict[str, None] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
            found.setdefault(fields[5], None)
    return list(found)


def thread_pool_libraries(paths: Sequence[str]) -> tuple[list[str], str | None]:
    """Of the loaded libraries: the OpenBLAS ones (sized again in each script's process),
    and why scripts cannot run in this process (another runtime that sizes a pool when it
    loads), or None."""
    openblas, other = [], []
    for path in paths:
        name = os.path.basename(path).lower()
        if "openblas" in name:
            openblas.append(path)
        elif name.startswith(OTHER_POOLS):
            other.append(os.path.basename(path))
    if other:
        return openblas, (
            f"the warm process has loaded {', '.join(other)}, whose threads were sized from "
            "its own environment, not the job's"
        )
    return openblas, None


def openblas_threads(env: Mapping[str, str], cpus: int) -> int:
    """The size OpenBLAS gives its pool when it loads in ``env`` with ``cpus`` usable CPUs
    (its ``blas_get_cpu_number``: OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS, else
    OMP_NUM_THREADS, the first that is a positive number; else every CPU; at most
    ``cpus``). Its compile-time ceiling is applied by its own setter."""
    wanted = 0
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        value = _leading_int(env.get(name, ""))
        if value > 0:
            wanted = value
            break
    return min(wanted, cpus) if wanted > 0 else cpus


def _leading_int(text: str) -> int:
    """``atoi``: the number at the start of ``text`` (0 if none)."""
    text = text.lstrip()
    digits = ""
    for ch in text:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


@contextlib.contextmanager
def loading_with_one_thread(env: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """Around the zygote's import of Snakemake (which loads numpy's OpenBLAS): OpenBLAS
    loads with a pool of one (``OPENBLAS_NUM_THREADS=1``, which its rule reads first); the
    environment is as it was afterwards."""
    saved = env.get("OPENBLAS_NUM_THREADS")
    env["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if saved is None:
            env.pop("OPENBLAS_NUM_THREADS", None)
        else:
            env["OPENBLAS_NUM_THREADS"] = saved


@dataclass(frozen=True)
class Pools:
    """The zygote's loaded OpenBLAS pools: each one's setter and the size it loaded with
    (its getter's, before anything resized it)."""

    setters: tuple[Any, ...] = ()
    loaded: tuple[int, ...] = ()
    #: Loaded OpenBLAS libraries without a setter this plugin knows or could reach
    #: (loaded with one thread: a process that needs more cannot have them), and an
    #: OpenMP runtime, whose thread count an OpenMP build of OpenBLAS's setter would also
    #: set for every job forked after it.
    unsized: tuple[str, ...] = ()
    #: Why a script cannot run in a fork of the zygote (another runtime that sized a pool
    #: at load, or an OpenBLAS of ``unsized``): it goes through the shell.
    reason: str | None = None


def find_pools() -> Pools:
    """In the zygote, once, after Snakemake's import: its loaded OpenBLAS pools."""
    try:
        with open("/proc/self/maps") as f:
            paths = loaded_libraries(f.read())
    except OSError as e:
        return Pools(reason=f"its loaded libraries could not be read ({e})")
    openblas, reason = thread_pool_libraries(paths)  # (a reason if OpenMP is loaded)
    openmp = [name for name in map(os.path.basename, paths) if name.startswith(OPENMP)]
    if openblas and openmp:  # an OpenMP build's setter would set every job's OpenMP threads
        return Pools(unsized=(openmp[0],), reason=reason)
    setters, loaded, unsized = [], [], []
    for path in openblas:
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            unsized.append(os.path.basename(path))
            continue
        for setter, getter in OPENBLAS_SYMBOLS:
            if hasattr(library, setter) and hasattr(library, getter):
                setters.append(getattr(library, setter))
                loaded.append(int(getattr(library, getter)()))
                break
        else:
            unsized.append(os.path.basename(path))
    if reason is None and unsized:
        reason = f"its {unsized[0]} has no thread setter this plugin knows"
    return Pools(tuple(setters), tuple(loaded), tuple(unsized), reason)


def size_thread_pools(pools: Pools, env: Mapping[str, str]) -> bool:
    """In a process forked from the zygote: its OpenBLAS pools as a fresh interpreter
    would size them when loaded in ``env``, each resized only if that is not the size it
    loaded with (a resize starts the pool's threads at once). False if one of them needed
    another size and has no setter (``pools.unsized``)."""
    threads = openblas_threads(env, len(os.sched_getaffinity(0)))
    for setter, loaded in zip(pools.setters, pools.loaded, strict=True):
        if threads != loaded:
            setter(threads)
    return not pools.unsized or threads == 1

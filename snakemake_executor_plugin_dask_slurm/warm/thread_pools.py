"""The thread pools a warm script's process sizes as a fresh interpreter would.

OpenBLAS (numpy's, which Snakemake imports through yte) sizes its thread pool when it
loads, from the environment: a fresh interpreter's from the job's (``threads``, which
Snakemake's shell exports), the zygote's from its own. In the zygote, :func:`find_blas_setters`
finds how to resize its pools, or why scripts cannot run in it (another runtime that sized
a pool at load), kept in its :class:`.context.ScriptSetup`; in a script's process,
:func:`size_thread_pools` sizes them from the job's environment.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
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
#: Other runtimes that size a pool when they load (OpenMP, MKL, BLIS, TBB): with any of
#: them loaded in the zygote, scripts go through the shell (no way to resize each here).
OTHER_POOLS = ("libgomp", "libiomp", "libomp", "libmkl", "libblis", "libtbb")


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


def find_blas_setters() -> tuple[list[Any], str | None]:
    """In the zygote, once: the setters of the loaded OpenBLAS pools, or why scripts
    cannot run in it."""

    try:
        with open("/proc/self/maps") as f:
            paths = loaded_libraries(f.read())
    except OSError as e:
        return [], f"its loaded libraries could not be read ({e})"
    openblas, reason = thread_pool_libraries(paths)
    if reason is not None:
        return [], reason
    setters = []
    for path in openblas:
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        for setter, getter in OPENBLAS_SYMBOLS:
            if hasattr(library, setter) and hasattr(library, getter):
                setters.append(getattr(library, setter))
                break
        else:
            name = os.path.basename(path)
            return [], f"its {name} has no thread setter this plugin knows"
    return setters, None


def size_thread_pools(setters: Sequence[Any], env: Mapping[str, str]) -> None:
    """In a script's process: the OpenBLAS pools as a fresh interpreter would size them
    from the job's environment."""
    threads = openblas_threads(env, len(os.sched_getaffinity(0)))
    for setter in setters:
        setter(threads)

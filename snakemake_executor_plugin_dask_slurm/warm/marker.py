"""The job marker of a forked job process, where ``/proc/<pid>/environ`` shows it.

Every process of a job carries ``DASK_SLURM_JOB=<task key>`` in its environment (see
:mod:`..worker.proctree`): the worker, its supervisor and the sweep find a job's processes
by it. A process started with ``exec`` gets it from its environment; a process that is
only forked (a warm job's own process) keeps the environment block of the process it was
forked from, which ``/proc/<pid>/environ`` reads from the process's memory. So the zygote
is started with a placeholder item of fixed size, ``DASK_SLURM_JOB_SLOT=xxx...``, and a
job's process overwrites those bytes, in its own copy of that memory, with its marker
padded with NULs (what ``setproctitle`` does to the command line). Linux only.
"""

from __future__ import annotations

import ctypes

from ..worker.proctree import JOB_MARKER
from ..worker.warm_protocol import SLOT_BYTES, SLOT_VARIABLE, slot_value

__all__ = ["SLOT_BYTES", "SLOT_VARIABLE", "available", "fits", "slot_value", "write"]
_SLOT_PREFIX = f"{SLOT_VARIABLE}=".encode()
#: Field 50 of /proc/<pid>/stat, counted from the state (field 3) after the command name.
_ENV_START_INDEX = 50 - 3


def fits(key: str) -> bool:
    return len(f"{JOB_MARKER}={key}".encode()) <= SLOT_BYTES


def _env_start() -> int:
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[_ENV_START_INDEX])


def _slot_offset() -> int | None:
    with open("/proc/self/environ", "rb") as f:
        data = f.read()
    at = 0 if data.startswith(_SLOT_PREFIX) else data.find(b"\0" + _SLOT_PREFIX) + 1
    if at == 0 and not data.startswith(_SLOT_PREFIX):
        return None
    if data[at : at + SLOT_BYTES + 1] != _SLOT_PREFIX + slot_value().encode() + b"\0":
        return None  # not ours, or already written
    return at


def write(key: str) -> bool:
    """Put ``DASK_SLURM_JOB=key`` where this process's initial environment had the slot;
    whether ``/proc/self/environ`` now shows it."""
    item = f"{JOB_MARKER}={key}".encode()
    if len(item) > SLOT_BYTES:
        return False
    try:
        offset = _slot_offset()
        if offset is None:
            return False
        ctypes.memmove(_env_start() + offset, item + b"\0" * (SLOT_BYTES - len(item)), SLOT_BYTES)
        with open("/proc/self/environ", "rb") as f:
            return (b"\0" + item + b"\0") in (b"\0" + f.read())
    except (OSError, ValueError, IndexError):
        return False


def available() -> bool:
    """Whether this process was started with the slot (and can read its own /proc)."""
    try:
        return _slot_offset() is not None
    except OSError:
        return False

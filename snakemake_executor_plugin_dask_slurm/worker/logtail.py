"""The end of a log file, made fit for an error message (standard library only).

Used on the workers (a failed job's last lines travel back with its outcome) and in
Snakemake's process (a scheduler, worker or srun step that died is quoted). Dask writes
its failures as Python tracebacks, coloured: quoted whole, the frames of Dask's own
source bury the one line that says what happened ("ValueError: 'ib9' is not a valid
network interface"). So colour codes are removed and traceback frames folded away, the
exception lines kept.
"""

from __future__ import annotations

import os
import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TAIL_BYTES = 65536
_FRAME = re.compile(r'^\s+File "')


def read_tail(path: str | os.PathLike[str], lines: int = 20, fold: bool = False) -> str:
    """The last ``lines`` lines of ``path`` ("" if it cannot be read), colour codes
    removed; with ``fold``, traceback frames folded first (see :func:`fold_tracebacks`)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    text = _ANSI.sub("", text)
    if fold:
        text = fold_tracebacks(text)
    return "\n".join(text.splitlines()[-lines:])


def fold_tracebacks(text: str) -> str:
    """``text`` with each traceback's frames replaced by one line saying how many there
    were; the ``Traceback ...`` header and the exception lines that follow stay."""
    out: list[str] = []
    frames = 0
    in_traceback = False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_traceback, frames = True, 0
            out.append(line)
            continue
        if in_traceback:
            if _FRAME.match(line):
                frames += 1
                continue
            if line.startswith((" ", "\t")) or not line.strip():
                continue  # the source line of a frame, or its ^^^^ marker
            out.append(f"  [{frames} traceback frame(s) folded]")
            in_traceback = False
        out.append(line)
    if in_traceback:
        out.append(f"  [{frames} traceback frame(s) folded]")
    return "\n".join(out)

"""SLURM's compressed lists: node lists (``n[1-3,7]``) and CPU counts (``40(x2),96``).

Pure, table-tested (tests/unit/test_hostlist.py), including the invalid inputs.
"""

from __future__ import annotations

import re
from itertools import product

# A node name piece outside brackets: what SLURM accepts in NodeName.
_NAME_PIECE = re.compile(r"[A-Za-z0-9._-]*")
_CPU_ENTRY = re.compile(r"(\d+)(?:\(x(\d+)\))?")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand_cpus_per_node(spec: str) -> list[int]:
    """Expand ``$SLURM_JOB_CPUS_PER_NODE`` into one CPU count per node, in node order.

    SLURM writes runs of equal counts as ``count(xrepeat)``: ``40(x2),96`` is
    ``[40, 40, 96]``. Raises ValueError naming the bad entry when the text does not parse.
    """
    if not spec.strip():
        raise ValueError("SLURM_JOB_CPUS_PER_NODE is empty: it should list CPUs per node")
    counts: list[int] = []
    for entry in spec.strip().split(","):
        match = _CPU_ENTRY.fullmatch(entry)
        if match is None:
            raise ValueError(
                f"cannot read SLURM_JOB_CPUS_PER_NODE={spec!r}: entry {entry!r} is "
                "neither a CPU count like '8' nor a run like '40(x2)'"
            )
        cpus, repeat = int(match[1]), int(match[2] or 1)
        if cpus < 1 or repeat < 1:
            raise ValueError(
                f"cannot read SLURM_JOB_CPUS_PER_NODE={spec!r}: entry {entry!r} has a "
                "zero count; every node holds at least one CPU and a run at least one node"
            )
        counts.extend([cpus] * repeat)
    return counts


def _split_top_level(spec: str) -> list[str]:
    """Split a hostlist at the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(spec):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {spec!r} has nested brackets")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {spec!r} has a ']' without its '['")
        elif char == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"hostlist {spec!r} has a '[' without its ']'")
    items.append(spec[start:])
    return items


def _expand_brackets(body: str, spec: str) -> list[str]:
    """Expand the inside of one bracket group, ``01-03,7`` -> ``01 02 03 7``."""
    numbers: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ValueError(
                f"hostlist {spec!r}: {part!r} in [{body}] is neither a number nor a "
                "range like '1-4' or '01-10'"
            )
        low, high = match[1], match[2] if match[2] is not None else match[1]
        if int(high) < int(low):
            raise ValueError(f"hostlist {spec!r}: range {part!r} runs backwards")
        # SLURM keeps the lower bound's zero padding: n[01-10] is n01 ... n10.
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def _expand_host_item(item: str, spec: str) -> list[str]:
    """Expand one comma-free item such as ``rack[1-2]-n[01-02]``."""
    if not item:
        raise ValueError(f"hostlist {spec!r} has an empty entry")
    pieces = re.split(r"\[([^\]]*)\]", item)  # literal, group, literal, group, ..., literal
    choices: list[list[str]] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            choices.append(_expand_brackets(piece, spec))
        elif _NAME_PIECE.fullmatch(piece):
            choices.append([piece])
        else:
            raise ValueError(f"hostlist {spec!r}: {piece!r} is not part of a node name")
    return ["".join(parts) for parts in product(*choices)]


def expand_hostlist(spec: str) -> list[str]:
    """Expand a SLURM hostlist (``n[1-3]``, ``a[01-03,7],b1``, ``r[1-2]-n[1-2]``).

    The fallback for when ``scontrol show hostnames`` cannot be run. Several bracket groups
    in one name expand with the first group varying slowest, as SLURM does. Raises
    ValueError on malformed text.
    """
    text = spec.strip()
    if not text:
        raise ValueError("hostlist is empty: SLURM_JOB_NODELIST should name the nodes")
    return [host for item in _split_top_level(text) for host in _expand_host_item(item, text)]

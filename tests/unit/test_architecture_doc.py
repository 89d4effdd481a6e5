"""docs/architecture.md against the code: the claims a test can check.

- The package map ("The package by domain", a fenced tree) names exactly the package's modules:
  every ``.py`` file but a subpackage's ``__init__.py``, and every subpackage as ``name/``.
- The layering table ("Rules the tests enforce") says, cell by cell, what
  tests/component/test_layering.py fails on: each cell is probed by writing a module with that one
  import (at module level, then inside a function) into a copy of the room's folder and running
  the layering test's per-module checks on it, so the table follows the test's behaviour, not its
  wording.
- The map stays a map: at most 500 lines, no dates, no review history.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.component import test_layering as layering

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "snakemake_executor_plugin_dask_slurm"
DOC = ROOT / "docs" / "architecture.md"
MAP = '"The package by domain"'
RULES = '"Rules the tests enforce"'
#: A line of the tree: its indentation (4 characters a level), then the entry's name.
TREE_LINE = re.compile(r"^((?:│   |    )*)(?:├── |└── )(\S+)")
VERDICTS = {(False, False): "✗", (False, True): "fn", (True, True): "·"}


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def tree_entries() -> list[str]:
    """Every path the package map names, relative to the package (folders end in ``/``)."""
    block = section("The package by domain").split("```")[1]
    stack: list[str] = []
    entries = []
    for line in block.splitlines():
        found = TREE_LINE.match(line)
        if not found:
            continue
        depth = len(found.group(1)) // 4
        name = found.group(2)
        del stack[depth:]
        entries.append("".join(stack) + name)
        if name.endswith("/"):
            stack.append(name)
    return entries


def subpackages() -> set[str]:
    return {
        str(init.parent.relative_to(PACKAGE)) + "/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE
    }


def mapped_modules() -> set[str]:
    """What the map must name: every module, without a subpackage's ``__init__.py``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = str(path.relative_to(PACKAGE))
        if path.name != "__init__.py" or path.parent == PACKAGE:
            found.add(name)
    return found


def test_the_tree_parser_reads_nested_entries() -> None:
    entries = tree_entries()
    assert "__init__.py" in entries
    assert "dispatch/clock/placement.py" in entries
    assert "clusters/worker_jobs/" in entries


def test_the_package_map_names_every_module_and_nothing_else() -> None:
    entries = tree_entries()
    doubled = sorted({entry for entry in entries if entries.count(entry) > 1})
    named = {entry for entry in entries if entry.endswith(".py")}
    missing = sorted(mapped_modules() - named)
    extra = sorted(named - mapped_modules())
    assert not (missing or extra or doubled), (
        f"docs/architecture.md, {MAP}: update the tree (one line per module, a subpackage's "
        f"__init__.py left out). Add: {missing or 'nothing'}. Remove: {extra or 'nothing'}. "
        f"Named twice: {doubled or 'nothing'}."
    )


def test_the_package_map_names_every_subpackage_and_only_existing_files() -> None:
    entries = tree_entries()
    folders = {entry for entry in entries if entry.endswith("/")}
    other = [e for e in entries if not e.endswith(("/", ".py")) and not (PACKAGE / e).is_file()]
    missing = sorted(subpackages() - folders)
    extra = sorted(folders - subpackages())
    assert not (missing or extra or other), (
        f"docs/architecture.md, {MAP}: update the tree's folders. Add: {missing or 'nothing'}. "
        f"Remove: {extra or 'nothing'}. Files that do not exist: {other or 'nothing'}."
    )


def layering_table() -> tuple[list[list[str]], dict[str, dict[str, str]]]:
    """The table of the rules section: its columns (each a list of module names) and, per
    row (a room), the cell of each column."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section(RULES.strip('"')).splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]
    header, body = rows[0], rows[1:]
    columns = [re.findall(r"`([\w.]+)`", cell) for cell in header[1:]]
    table = {}
    for row in body:
        (room,) = re.findall(r"`(\w+)`", row[0])
        table[room] = dict(zip(map(", ".join, columns), row[1:], strict=True))
    return columns, table


def per_module_checks() -> list[Callable[[Path], None]]:
    """The layering test's checks that take one module's path."""
    return [
        check
        for name, check in vars(layering).items()
        if name.startswith("test_") and list(inspect.signature(check).parameters) == ["path"]
    ]


def probe(tmp: Path, room: str, module: str, at_top: bool) -> bool:
    """Does the layering test let a module of ``room`` import ``module``?"""
    folder = tmp / layering.NAME / room
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "doc_probe.py"
    statement = f"import {module}\n"
    path.write_text(statement if at_top else f"def probe():\n    {statement}")
    try:
        for check in per_module_checks():
            check(path)
    except AssertionError:
        return False
    return True


def test_the_layering_table_has_a_row_and_a_column_for_every_room() -> None:
    columns, table = layering_table()
    rooms = {folder.rstrip("/") for folder in subpackages() if "/" not in folder.rstrip("/")}
    named = {name for column in columns for name in column}
    assert set(table) == rooms and rooms <= named, (
        f"docs/architecture.md, {RULES}: the table needs one row and one column per subpackage. "
        f"Rows to add: {sorted(rooms - set(table))}; rows to remove: {sorted(set(table) - rooms)}; "
        f"columns to add: {sorted(rooms - named)}."
    )


def test_the_layering_table_is_what_the_layering_test_enforces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layering, "PACKAGE", tmp_path / layering.NAME)
    assert per_module_checks(), "tests/component/test_layering.py has no per-module check"
    columns, table = layering_table()
    own = {p.name for p in PACKAGE.iterdir() if p.is_dir()} | {p.stem for p in PACKAGE.glob("*.py")}
    wrong = []
    for room, cells in table.items():
        for column in columns:
            said = cells[", ".join(column)]
            for name in column:
                module = f"{layering.NAME}.{name}" if name in own else name
                allowed = tuple(probe(tmp_path, room, module, at_top) for at_top in (True, False))
                enforced = VERDICTS.get(allowed, f"{allowed}")
                if said != enforced:
                    wrong.append(f"row {room}, column {name}: says {said!r}, the test {enforced!r}")
    assert not wrong, (
        f"docs/architecture.md, {RULES}: update these cells of the layering table to what "
        "tests/component/test_layering.py enforces (✗ fails, fn only inside a function, · not "
        "forbidden): " + "; ".join(wrong)
    )


def test_the_probe_sees_both_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard against a probe that cannot fail: worker/ may import distributed only inside a
    function, and may import the standard library anywhere."""
    monkeypatch.setattr(layering, "PACKAGE", tmp_path / layering.NAME)
    assert not probe(tmp_path, "worker", "distributed", at_top=True)
    assert probe(tmp_path, "worker", "distributed", at_top=False)
    assert probe(tmp_path, "worker", "json", at_top=True)


def test_the_map_is_short_and_carries_no_history() -> None:
    text = DOC.read_text()
    lines = text.count("\n")
    assert lines <= 500, f"docs/architecture.md has {lines} lines: shorten it to at most 500"
    history = re.findall(r"\b20\d\d-\d\d-\d\d\b|\bissue \d+|found in review|this session", text)
    assert not history, (
        f"docs/architecture.md names {history}: dates and history go to CHANGELOG.md, "
        "measurements to docs/benchmarks.md"
    )

"""The package's shape: no function over 60 lines, no module over 400, each class name one
meaning. A failure names what broke the rule; split it along its seams, or rename it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import snakemake_executor_plugin_dask_slurm

MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400
PACKAGE = Path(snakemake_executor_plugin_dask_slurm.__file__).parent


def modules() -> dict[str, str]:
    """Each module's text by its path in the package ("slurm/allocation.py")."""
    return {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py")}


def functions(tree: ast.Module) -> list[tuple[str, int]]:
    """Each function's dotted name in its module ("Class.method", "outer.inner") and length."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, f"{name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def test_the_checks_see_the_package() -> None:
    found = modules()
    assert "slurm/allocation.py" in found
    names = [name for name, _ in functions(ast.parse(found["slurm/allocation.py"]))]
    assert "read_allocation" in names and "Allocation.total_cpus" in names


def test_no_function_is_over_60_lines() -> None:
    long = [
        f"{path} {name}: {lines} lines"
        for path, text in sorted(modules().items())
        for name, lines in functions(ast.parse(text))
        if lines > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_module_is_over_400_lines() -> None:
    long = [
        f"{path}: {len(text.splitlines())} lines"
        for path, text in sorted(modules().items())
        if len(text.splitlines()) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_two_classes_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path, text in sorted(modules().items()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(path)
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"class names with more than one meaning: {shared}"


def test_the_executor_stays_glue() -> None:
    """Snakemake's hooks call out (executor/run.py wires a run): plugin.py at most 300 lines,
    ``Executor.__post_init__`` under 40."""
    text = modules()["executor/plugin.py"]
    assert len(text.splitlines()) <= 300, "executor/plugin.py: move what it wires to run.py"
    lengths = dict(functions(ast.parse(text)))
    assert lengths["Executor.__post_init__"] < 40, "Executor.__post_init__: wire in run.py"

"""Docs that cannot drift silently: every ``:mod:``/``:class:``/``:func:``/``:meth:``/
``:data:`` reference in the package's docstrings and comments resolves to something that
exists, every path of this repository named in docs/*.md and README.md exists, and so does
every path of its tests, docs, benchmarks and scripts that the package's own text names.

References follow Python's relative imports: ``.x`` is the module ``x`` beside the one
that names it, ``..x`` one package up; a bare name is looked up in the naming module
first; anything else must import as written (``distributed.Client``).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "snakemake_executor_plugin_dask_slurm"
ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc):`~?!?([^`<>]+?)`")
#: A path in backticks: a file with an extension we keep, or a folder ending in "/".
PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|md|sh|txt|toml|yaml|json|cfg)|(?:[\w.-]+/)+)`")
#: Paths of other projects the docs cite (Snakemake's, distributed's, ...), not ours.
FOREIGN = (
    "snakemake/", "distributed/", "deploy/", "dask_jobqueue/", "submitit/", "parsl/",
    "core/", "crates/", "executors/", "script/", "providers/", "slurm/test_slurm.py",
    "docs/snakefiles/", "docs/executing/", "historical/", "/etc/", ".snakemake/",
    "snakemake_interface_executor_plugins/", "common/", "scheduler/",
    # inside the run directory (README's list), and what a benchmark run writes
    "logs/", "workers/", "worker-jobs/", "warm-prime.json", "status.json",
    "results.json", "results.md", "samples.json",
    # a run's usage report (docs/further.md)
    "usage/", "suggested-profile.yaml",
)  # fmt: skip


def _modules() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _in_a_class(module: ModuleType, name: str) -> bool:
    """A bare ``:meth:`name``` inside a class's docstring: a method of some class here."""
    return any(
        isinstance(obj, type) and obj.__module__ == module.__name__ and hasattr(obj, name)
        for obj in vars(module).values()
    )


def _resolve_in(obj: Any, attrs: list[str]) -> bool:
    for attr in attrs:
        if not hasattr(obj, attr):
            annotations = getattr(obj, "__annotations__", {})
            fields = getattr(obj, "__dataclass_fields__", {})
            slots = getattr(obj, "__slots__", ())
            return attr in annotations or attr in fields or attr in slots
        obj = getattr(obj, attr)
    return True


def _resolve_absolute(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module: ModuleType = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _resolve_in(module, parts[cut:])
    return False


def resolves(target: str, module_name: str, is_package: bool) -> bool:
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base = module_name.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (dots - 1)] if dots > 1 else base
        return _resolve_absolute(".".join([*base, target.lstrip(".")]))
    own = importlib.import_module(module_name)
    if _resolve_in(own, target.split(".")) or ("." not in target and _in_a_class(own, target)):
        return True
    return _resolve_absolute(target)


def references() -> list[tuple[str, str, bool]]:
    found = []
    for path in _modules():
        name = _module_name(path)
        for target in ROLE.findall(path.read_text()):
            found.append((name, target.strip(), path.name == "__init__.py"))
    return found


def test_the_package_has_references_to_check() -> None:
    assert len(references()) > 20


@pytest.mark.parametrize(("module", "target", "is_package"), references())
def test_every_reference_in_the_package_resolves(
    module: str, target: str, is_package: bool
) -> None:
    assert resolves(target, module, is_package), f"{module}: :...:`{target}` names nothing"


def doc_paths() -> list[tuple[str, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = []
    for doc in docs:
        for path in PATH.findall(doc.read_text()):
            if not path.startswith(FOREIGN) and "*" not in path and "<" not in path:
                found.append((doc.name, path))
    return sorted(set(found))


def _exists(path: str) -> bool:
    bases = (ROOT, ROOT / PACKAGE, ROOT / "docs", ROOT / "tests", ROOT / "benchmarks")
    return any((base / path).exists() for base in bases)


@pytest.mark.parametrize(("doc", "path"), doc_paths())
def test_every_path_the_docs_name_exists(doc: str, path: str) -> None:
    assert _exists(path), f"{doc} names {path}, which does not exist"


#: A test the docs name: ``tests/x.py::test_name`` (a parameter's id in brackets allowed).
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[\w-]+\])?`")


def doc_tests() -> list[tuple[str, str, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return sorted({(d.name, *ref) for d in docs for ref in TEST_REF.findall(d.read_text())})


def test_the_docs_name_tests_to_check() -> None:
    assert any(doc == "further.md" for doc, _, _ in doc_tests())
    assert TEST_REF.findall("`tests/a.py::test_b[sigkill]`") == [("tests/a.py", "test_b")]


@pytest.mark.parametrize(("doc", "path", "name"), doc_tests())
def test_every_test_the_docs_name_exists(doc: str, path: str, name: str) -> None:
    """The guide's table of what the run promises on each fault names the test that
    shows each promise: each one must exist (not renamed or removed)."""
    text = (ROOT / path).read_text() if (ROOT / path).exists() else ""
    assert re.search(rf"^(async )?def {name}\(", text, re.M), f"{doc} names {path}::{name}"


def test_the_package_path_check_sees_paths_in_docstrings_and_comments() -> None:
    text = "(``tests/unit/test_x.py`` fails); # see docs/further.md, and benchmarks/run.py"
    found = OWN_PATH.findall(text)
    assert found == ["tests/unit/test_x.py", "docs/further.md", "benchmarks/run.py"]


def test_the_checks_catch_a_broken_reference_and_path() -> None:
    assert not resolves(".no_such_module.Thing", f"{PACKAGE}.dispatch.registry", False)
    assert not resolves("..dispatch.registry.NoSuchClass", f"{PACKAGE}.executor.plugin", False)
    assert resolves("..dispatch.registry.JobRecord.next_run", f"{PACKAGE}.executor.plugin", False)
    assert resolves(".registry.JobRecord", f"{PACKAGE}.dispatch.routing", False)
    assert resolves(".plugin", f"{PACKAGE}.executor", True)
    assert resolves("JobRecord", f"{PACKAGE}.dispatch.registry", False)
    assert resolves("distributed.Client", f"{PACKAGE}.dispatch.registry", False)
    assert not _exists("dispatch/no_such_module.py") and _exists("dispatch/registry.py")


#: A path of this repository's tests, docs, benchmarks or scripts, as the package's
#: docstrings and comments name them (with or without backticks).
OWN_PATH = re.compile(
    r"\b((?:tests|docs|benchmarks|scripts|testcluster)/[\w/.-]*\w\.(?:py|md|sh))\b"
)


def package_paths() -> list[tuple[str, str]]:
    found = []
    for path in _modules():
        for named in OWN_PATH.findall(path.read_text()):
            found.append((str(path.relative_to(ROOT / PACKAGE)), named))
    return sorted(set(found))


def test_the_package_names_paths_to_check() -> None:
    assert len(package_paths()) > 10


@pytest.mark.parametrize(("module", "path"), package_paths())
def test_every_path_the_package_names_exists(module: str, path: str) -> None:
    assert (ROOT / path).exists(), f"{module} names {path}, which does not exist"


def test_every_setting_the_docs_name_exists() -> None:
    import dataclasses

    from snakemake_executor_plugin_dask_slurm.settings import ExecutorSettings

    settings = {
        f"--dask-slurm-{f.name.replace('_', '-')}" for f in dataclasses.fields(ExecutorSettings)
    }
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        named = set(re.findall(r"--dask-slurm-[a-z][a-z-]*[a-z]", path.read_text()))
        assert named <= settings, (path.name, sorted(named - settings))


def test_the_catalog_page_tells_of_the_warm_path_and_the_usage_report() -> None:
    """docs/intro.md is what the Snakemake plugin catalog shows: the two things a user
    meets in every run are there, with the files the report writes and how to turn each off."""
    from snakemake_executor_plugin_dask_slurm.report.usage import words

    intro = (ROOT / "docs" / "intro.md").read_text()
    assert "**warm**" in intro and "--dask-slurm-no-warm" in intro
    assert "**usage" in intro and "--dask-slurm-no-usage-report" in intro
    for name in (words.JOBS_FILE, words.RULES_FILE, words.PAGE_FILE, words.PROFILE_FILE):
        assert f"`{name}`" in intro, name


def test_the_architecture_names_the_modules_the_layering_test_lets_start_processes() -> None:
    """docs/architecture.md, "Rules the tests enforce", lists the modules that may import
    ``subprocess``: exactly those of tests/component/test_layering.py."""
    from tests.component.test_layering import SUBPROCESS_USERS

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Rules the tests enforce") :]
    section = " ".join(section[: section.index("\n#", 1)].split())
    listed = section[section.index("a module other than these") :].split(";", 1)[0]
    named = set(re.findall(r"`([\w/]+\.py)`", listed))
    assert named == SUBPROCESS_USERS, (named ^ SUBPROCESS_USERS, listed)
    words = {1: "one", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    assert f"these {words.get(len(named), len(named))} imports" in listed

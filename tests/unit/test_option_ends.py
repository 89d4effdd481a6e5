"""A warm job's argument parse with configargparse's end-of-arguments answer remembered
(warm/option_ends.py): the same result as without it, kept for one parse only, and applied
only to the ConfigArgParse code it was checked against (fails loudly on a release that
changes that code: check the memo still holds, then record the new fingerprint)."""

from __future__ import annotations

import re
from typing import Any

import configargparse
import pytest

from snakemake_executor_plugin_dask_slurm.warm import option_ends

pytestmark = pytest.mark.unit

#: A warm job's command, as the plugin's job command builder makes it (its arguments).
JOB_ARGV = [
    "--snakefile", "/w/Snakefile", "--target-jobs", "one:i=66", "--allowed-rules", "one",
    "--cores", "2", "--attempt", "1", "--force-use-threads", "--wait-for-files",
    "/w/.snakemake/tmp.x", "--force", "--target-files-omit-workdir-adjustment",
    "--max-inventory-time", "0", "--retries", "0", "--nocolor", "--no-hooks", "--nolock",
    "--ignore-incomplete", "--rerun-triggers", "code", "software-env", "mtime", "params",
    "input", "--conda-frontend", "conda", "--shared-fs-usage", "software-deployment",
    "sources", "storage-local-copies", "source-cache", "software-deployment-cache",
    "persistence", "input-output", "--latency-wait", "5", "--scheduler", "ilp",
    "--default-resources", "base64//dG1wZGlyPXN5c3RlbV90bXBkaXI=",
    "--max-jobs-per-timespan", "100000/0s", "--scheduler", "greedy", "--preemptible-rules",
    "--preemptible-retries", "0", "--mode", "remote",
]  # fmt: skip


def _snakemake_parser() -> Any:
    from snakemake.cli import get_argument_parser

    return get_argument_parser()


def _shown(value: Any) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))  # objects without __eq__


def test_the_configargparse_code_the_memo_stands_in_for_is_the_checked_one() -> None:
    """On a ConfigArgParse whose code changed, warm jobs parse as before (slower): read
    the changed functions (option_ends.FUNCTIONS), and if the answer of
    ``_find_end_of_this_parsers_args`` still depends only on the parser's options and the
    arguments, record ``option_ends.fingerprint(configargparse)`` as CHECKED."""
    assert option_ends.fingerprint(configargparse) == option_ends.CHECKED
    assert option_ends.applicable(_snakemake_parser())


def test_a_parse_with_the_memo_is_the_parse_without_it() -> None:
    plain, remembering = _snakemake_parser(), _snakemake_parser()
    assert option_ends.remember_ends(remembering)
    assert not option_ends.remember_ends(remembering)  # once
    expected = plain.parse_args(JOB_ARGV)
    found = remembering.parse_args(JOB_ARGV)
    assert _shown(sorted(vars(found).items())) == _shown(sorted(vars(expected).items()))
    assert _shown(remembering._source_to_settings) == _shown(plain._source_to_settings)


def test_the_memo_lasts_one_parse_and_answers_each_command_line_for_itself() -> None:
    parser = configargparse.ArgumentParser(prog="x")
    parser.add_argument("--a", env_var="OPTION_ENDS_A")
    parser.add_argument("--b", nargs="*")
    calls: list[tuple[str, ...]] = []
    real = parser._find_end_of_this_parsers_args

    def counting(args: Any) -> Any:
        calls.append(tuple(args))
        return real(args)

    parser._find_end_of_this_parsers_args = counting
    assert option_ends.remember_ends(parser)
    first = parser.parse_known_args(["--b", "1", "2"], env_vars={"OPTION_ENDS_A": "v"})
    assert first[0].a == "v" and first[0].b == ["1", "2"]
    once = len(calls)
    assert once == len(set(calls))  # each command line walked once in a parse
    second = parser.parse_known_args(["--a", "w", "--", "z"], env_vars={"OPTION_ENDS_A": "v"})
    assert second[0].a == "w"
    assert len(calls) > once  # a new parse walks again: nothing kept across parses
    # outside a parse the parser answers as it did
    assert parser._find_end_of_this_parsers_args(["--a", "1", "--", "x"]) == 2
    assert parser._find_end_of_this_parsers_args(["--a", "1", "--", "x"]) == 2
    assert calls[-2:] == [("--a", "1", "--", "x")] * 2


def test_not_applied_to_other_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    assert not option_ends.remember_ends(argparse.ArgumentParser())
    monkeypatch.setattr(option_ends, "_checked", lambda: False)
    parser = _snakemake_parser()
    assert not option_ends.remember_ends(parser)
    assert "parse_known_args" not in vars(parser)


def test_a_missing_function_has_no_fingerprint() -> None:
    class Bare:
        ArgumentParser = object

    assert option_ends.fingerprint(Bare) is None

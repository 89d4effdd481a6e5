"""SLURM's compressed lists: node names (n[1-3,7]) and CPUs per node (40(x2),96)."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.hostlist import (
    expand_cpus_per_node,
    expand_hostlist,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("8", [8]),
        ("40(x2),96", [40, 40, 96]),
        ("4(x2),8", [4, 4, 8]),
        ("1(x3)", [1, 1, 1]),
        ("2,4(x1),2", [2, 4, 2]),
        (" 16(x2) ", [16, 16]),
    ],
)
def test_expand_cpus_per_node(spec: str, expected: list[int]) -> None:
    assert expand_cpus_per_node(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("4(x)", "entry '4(x)'"),
        ("x", "entry 'x'"),
        ("0", "zero count"),
        ("-4", "entry '-4'"),
        ("4(x0)", "zero count"),
        ("4(x2)8", "entry '4(x2)8'"),
        ("4,,8", "entry ''"),
        ("4(2)", "entry '4(2)'"),
        ("4 (x2)", "entry '4 (x2)'"),
        ("4.5", "entry '4.5'"),
    ],
)
def test_expand_cpus_per_node_rejects(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        expand_cpus_per_node(spec)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a[01-03,7],b1", ["a01", "a02", "a03", "a7", "b1"]),
        ("n[001-002]", ["n001", "n002"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("gpu[1,3]-ib", ["gpu1-ib", "gpu3-ib"]),
        ("n1,n2,login.example.org", ["n1", "n2", "login.example.org"]),
        ("node_a[5]", ["node_a5"]),
    ],
)
def test_expand_hostlist(spec: str, expected: list[str]) -> None:
    assert expand_hostlist(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "is empty"),
        ("n[", "without its ']'"),
        ("n[1-2", "without its ']'"),
        ("n]", "without its '\\['"),
        ("n[]", "neither a number nor a range"),
        ("n[a]", "neither a number nor a range"),
        ("n[1-]", "neither a number nor a range"),
        ("n[3-1]", "runs backwards"),
        ("n[[1]]", "nested brackets"),
        ("a,,b", "empty entry"),
        (",", "empty entry"),
        ("a b", "not part of a node name"),
    ],
)
def test_expand_hostlist_rejects(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_hostlist(spec)

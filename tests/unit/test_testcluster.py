"""The SLURM test cluster tool's pure parts (testcluster/cluster.py): node lists, the
slurm.conf and hosts files it writes. Bringing it up is tested in test_slurm_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakemake_executor_plugin_dask_slurm.slurm.hostlist import expand_cpus_per_node
from testcluster import cluster


@pytest.mark.parametrize(
    ("spec", "cpus"), [("4,4,8", (4, 4, 8)), (" 2 , 16 ", (2, 16)), ("1", (1,))]
)
def test_parse_node_cpus(spec: str, cpus: tuple[int, ...]) -> None:
    assert cluster.parse_node_cpus(spec) == cpus


@pytest.mark.parametrize("spec", ["", "4,x", "0", "4,,513", "-1", "4.5"])
def test_parse_node_cpus_refuses(spec: str) -> None:
    with pytest.raises(cluster.ClusterError, match="Invalid node list"):
        cluster.parse_node_cpus(spec)


@pytest.mark.parametrize(
    ("cpus", "expected"), [([4, 4, 8], "4(x2),8"), ([8], "8"), ([2, 4, 4, 2], "2,4(x2),2")]
)
def test_compressed_cpus_is_what_the_plugin_expands(cpus: list[int], expected: str) -> None:
    assert cluster.compressed_cpus(cpus) == expected
    assert expand_cpus_per_node(expected) == cpus


def test_nodes_and_their_slurm_conf_lines() -> None:
    nodes = cluster.make_nodes((4, 4, 8))
    assert [(n.name, n.cpus, n.address, n.netns) for n in nodes] == [
        ("n1", 4, f"{cluster.SUBNET}.11", "dask-slurm-n1"),
        ("n2", 4, f"{cluster.SUBNET}.12", "dask-slurm-n2"),
        ("n3", 8, f"{cluster.SUBNET}.13", "dask-slurm-n3"),
    ]
    conf = cluster.slurm_conf_text(nodes, cluster.Paths(Path("/run/x"))).splitlines()
    assert f"NodeName=n3 NodeAddr={cluster.SUBNET}.13 NodeHostname=n3 CPUs=8 " in conf[-2] + " "
    assert "SlurmdParameters=config_overrides" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf
    assert conf[-1].startswith("PartitionName=")


def test_hosts_files() -> None:
    nodes = cluster.make_nodes((4, 8))
    text = cluster.node_hosts_text(nodes, "login7")
    names = cluster.hosts_names(text)
    assert names["n2"].split()[0] == f"{cluster.SUBNET}.12"
    assert names["login7"].split()[0] == cluster.LOGIN_ADDRESS
    assert "login7" not in cluster.node_hosts_text(nodes, "n1")  # a node's name is no login
    assert all(cluster.HOSTS_MARKER in line for line in cluster.login_hosts_lines(nodes))


def test_defaults_from_the_environment(tmp_path: Path) -> None:
    assert cluster.default_node_cpus({}) == cluster.DEFAULT_NODE_CPUS
    assert cluster.default_node_cpus({cluster.NODES_ENV: "2,2"}) == (2, 2)
    assert cluster.default_state_dir({cluster.STATE_DIR_ENV: str(tmp_path)}) == tmp_path

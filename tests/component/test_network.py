"""Choosing the scheduler's address: routes, interfaces, and the choice between them."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import psutil
import pytest

from snakemake_executor_plugin_dask_slurm.clusters import network
from snakemake_executor_plugin_dask_slurm.clusters.network import (
    NetworkError,
    address_on_route_to,
    choose_scheduler_host,
    interface_address,
)


def local_ipv4_addresses() -> list[str]:
    return [
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]


@pytest.mark.parametrize(
    ("host", "expected"), [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1")]
)
def test_address_on_route_to_loopback(host: str, expected: str) -> None:
    assert address_on_route_to(host) == expected


def test_address_on_route_to_a_local_address_is_that_address() -> None:
    # The route to one of this machine's own addresses leaves from that address, not from
    # loopback or the default route: the answer depends on the destination.
    addresses = local_ipv4_addresses()
    if not addresses:
        pytest.skip("no non-loopback IPv4 address on this machine")
    for address in addresses:
        assert address_on_route_to(address) == address


def test_address_on_route_to_unknown_host() -> None:
    with pytest.raises(NetworkError, match=r"Cannot resolve 'no-such-node\.invalid'") as caught:
        address_on_route_to("no-such-node.invalid")
    assert "--dask-slurm-scheduler-host" in str(caught.value)


def test_interface_address_loopback() -> None:
    assert interface_address("lo") == "127.0.0.1"


def test_interface_address_unknown_lists_the_interfaces() -> None:
    with pytest.raises(NetworkError, match="no network interface 'nosuch0'") as caught:
        interface_address("nosuch0")
    assert f"Interfaces here: {', '.join(sorted(psutil.net_if_addrs()))}." in str(caught.value)


def test_interface_address_without_ipv4(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {
        "ib0": [SimpleNamespace(family=socket.AF_INET6, address="fe80::1")],
        "lo": [SimpleNamespace(family=socket.AF_INET, address="127.0.0.1")],
    }
    monkeypatch.setattr(network.psutil, "net_if_addrs", lambda: fake)
    with pytest.raises(NetworkError, match=r"'ib0' has no IPv4 address.*Interfaces here: ib0, lo"):
        interface_address("ib0")


@pytest.mark.parametrize(
    ("interface", "host", "route_target", "allocated", "expected"),
    [
        (None, "10.1.2.3", "n1", False, ("10.1.2.3", "set with --dask-slurm-scheduler-host")),
        ("lo", "10.1.2.3", "n1", True, ("10.1.2.3", "set with --dask-slurm-scheduler-host")),
        ("lo", None, "n1", False, ("127.0.0.1", "address of interface lo")),
        (
            None,
            None,
            "localhost",
            True,
            (
                "127.0.0.1",
                "address on the route to localhost (this process runs on an allocated node; "
                "Dask's default guess may be an address the nodes cannot reach)",
            ),
        ),
        (
            None,
            None,
            "localhost",
            False,
            (
                "127.0.0.1",
                "address on the route to localhost (this host is not in the allocation; "
                "Dask's default guess may be an address the nodes cannot reach)",
            ),
        ),
        (
            None,
            None,
            None,
            True,
            ("127.0.0.1", "loopback: a one-node allocation, and the workers run here"),
        ),
        (
            None,
            None,
            None,
            False,
            ("127.0.0.1", "loopback: a local run, so only this machine needs to connect"),
        ),
    ],
)
def test_choose_scheduler_host(
    interface: str | None,
    host: str | None,
    route_target: str | None,
    allocated: bool,
    expected: tuple[str | None, str],
) -> None:
    assert choose_scheduler_host(interface, host, route_target, allocated) == expected


def test_choose_scheduler_host_bad_interface() -> None:
    with pytest.raises(NetworkError, match="no network interface 'nosuch0'"):
        choose_scheduler_host("nosuch0", None, "n1", False)

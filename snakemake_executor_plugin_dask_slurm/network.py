"""Pick the address the scheduler binds to, so that the workers on the nodes can reach it.

Dask's own guess (``distributed.utils.get_ip``) asks for the route to a public address.
On a login node that is the machine's outside address, which the compute nodes often
cannot reach; the right one is the local address on the route *to the nodes*. Nothing
here sends a packet: connecting a UDP socket only asks the kernel for a route.
"""

from __future__ import annotations

import socket

import psutil

from .errors import DaskSlurmError


class NetworkError(DaskSlurmError):
    """No usable address for the scheduler."""


def address_on_route_to(host: str) -> str:
    """This machine's address on the route to ``host`` (a node name or an address)."""
    try:
        family, kind, proto, _, target = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as error:
        raise NetworkError(
            f"Cannot resolve {host!r} to find the address on the route to it: {error}. "
            "The scheduler needs it to pick an address the nodes can reach. Check the "
            "node name, or choose the address with --dask-slurm-scheduler-host or the "
            "network with --dask-slurm-interface."
        ) from error
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.connect(target)  # UDP: sets the route, sends nothing
        except OSError as error:
            raise NetworkError(
                f"This machine has no route to {host} ({target[0]}): {error}. Choose the "
                "scheduler's address with --dask-slurm-scheduler-host or "
                "--dask-slurm-interface."
            ) from error
        return str(probe.getsockname()[0])


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name`` (as Dask's ``--interface`` uses)."""
    interfaces = psutil.net_if_addrs()
    if name not in interfaces:
        raise NetworkError(
            f"There is no network interface {name!r} on {socket.gethostname()}. "
            f"Interfaces here: {', '.join(sorted(interfaces))}. Choose one of them for "
            "--dask-slurm-interface (the one on the network the nodes share, often ib0)."
        )
    for address in interfaces[name]:
        if address.family == socket.AF_INET:
            return str(address.address)
    raise NetworkError(
        f"Network interface {name!r} has no IPv4 address, which Dask needs to bind to it. "
        f"Interfaces here: {', '.join(sorted(interfaces))}."
    )


def choose_scheduler_host(
    interface: str | None,
    host: str | None,
    first_node: str | None,
    this_node_is_allocated: bool,
) -> tuple[str | None, str]:
    """The address the scheduler binds to (None: Dask's default) and why.

    In order: a host the user set; the address of an interface the user set; Dask's
    default on an allocated node (the nodes share its network); the address on the route
    to ``first_node`` when running off the allocation (a login node); and loopback when
    there is no allocated node at all (a local run: nothing else needs to connect, and
    nothing else should).
    """
    if host:
        return host, "set with --dask-slurm-scheduler-host"
    if interface:
        return interface_address(interface), f"address of interface {interface}"
    if this_node_is_allocated:
        return None, "Dask's default: this process runs on an allocated node"
    if first_node:
        return address_on_route_to(first_node), (
            f"address on the route to {first_node}: this host is not in the allocation, "
            "so Dask's default guess may be an address the nodes cannot reach"
        )
    return "127.0.0.1", "loopback: a local run, so only this machine needs to connect"

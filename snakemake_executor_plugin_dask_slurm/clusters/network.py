"""Pick the address the scheduler binds to, so that the workers on the nodes can reach it.

Dask's own guess (``distributed.utils.get_ip``) asks for the route to a public address.
On a login node that is the machine's outside address, which the compute nodes often
cannot reach; the right one is the local address on the route *to the nodes*. Nothing
here sends a packet: connecting a UDP socket only asks the kernel for a route.
"""

from __future__ import annotations

import socket

import psutil

from ..errors import DaskSlurmError


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
    route_target: str | None,
    this_node_is_allocated: bool,
) -> tuple[str | None, str]:
    """The address the scheduler binds to and why.

    In order: a host the user set; the address of an interface the user set; the address
    on the route to ``route_target`` (an allocated node other than this one), so that
    the nodes can reach it whatever this host's default "guess my IP" answer is (on a
    login node that is often an outside address; on a node without a default route, or
    whose host name maps to 127.0.1.1, it can be unusable too); and loopback when no other
    node needs to connect (a local run, or a one-node allocation run on that node).
    """
    if host:
        return host, "set with --dask-slurm-scheduler-host"
    if interface:
        return interface_address(interface), f"address of interface {interface}"
    if route_target:
        where = (
            "this process runs on an allocated node"
            if this_node_is_allocated
            else "this host is not in the allocation"
        )
        return address_on_route_to(route_target), (
            f"address on the route to {route_target} ({where}; Dask's default guess may be "
            "an address the nodes cannot reach)"
        )
    if this_node_is_allocated:
        return "127.0.0.1", "loopback: a one-node allocation, and the workers run here"
    return "127.0.0.1", "loopback: a local run, so only this machine needs to connect"


def check_bindable(host: str | None) -> None:
    """Fail at once, naming the reason, if the scheduler could not listen on ``host``
    (an address this machine does not have, a name that does not resolve)."""
    if not host:
        return
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise NetworkError(
            f"The scheduler cannot listen on {host!r}: the name does not resolve "
            f"({error}). Give an address or name of this machine "
            "(--dask-slurm-scheduler-host), or a network interface (--dask-slurm-interface)."
        ) from error
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(address)
        except OSError as error:
            raise NetworkError(
                f"The scheduler cannot listen on {host} ({address[0]}): {error.strerror} "
                f"[errno {error.errno}]. {host} is probably not an address of "
                f"{socket.gethostname()}; give one of its addresses or names "
                "(--dask-slurm-scheduler-host), or a network interface "
                "(--dask-slurm-interface)."
            ) from error

"""Pick the network interface the collectives use, so multi-host runs work without the user
setting GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME by hand.

gloo otherwise binds to whatever the hostname resolves to, which on many clusters (and inside
network namespaces) is 127.0.0.1, and peers on other hosts are refused.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

_SIOCGIFADDR = 0x8915


def interface_towards(address: str) -> str | None:
    """Name of the local interface whose address routes to ``address`` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(address), 9))
            local_ip = probe.getsockname()[0]
    except OSError:
        return None
    for _, name in socket.if_nameindex():
        if interface_address(name) == local_ip:
            return name
    return None


def interface_address(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def non_loopback_interface() -> str | None:
    """The first interface holding an IPv4 address outside 127.0.0.0/8."""
    for _, name in socket.if_nameindex():
        address = interface_address(name)
        if address and not address.startswith("127."):
            return name
    return None


def choose_interface(
    master_addr: str | None, override: str | None = None, multi_node: bool = True
) -> str | None:
    """Point gloo and NCCL at ``override``, else at an interface the user already set, else at
    the one that reaches the master; with no master (file rendezvous), at the node's network
    address across nodes and at loopback on one. Return the name used (None if none was found)."""
    if master_addr:
        automatic = interface_towards(master_addr)
    else:
        automatic = non_loopback_interface() if multi_node else interface_towards("127.0.0.1")
    name = override or os.environ.get("GLOO_SOCKET_IFNAME") or automatic
    if name:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if override or var not in os.environ:
                os.environ[var] = name
    return name

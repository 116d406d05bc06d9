"""How this machine and a target reach each other's TCP ports, for workloads whose two ends
run on different machines (net with ``peer=host`` or ``peer=from-host``, a relay ring spread
over the target and this machine).

A target is this machine itself (both ends on its loopback), one of vmtax's L1 guests with
a user network (``vmtax run --guest-net user``: the guest reaches this machine's loopback
at 10.0.2.2, and this machine reaches the guest's ``FORWARDED_PORTS`` on loopback ports QEMU
forwards), or an SSH host (each end listens on its own address of the SSH connection, where
the other end reached it, on a port free there). Anything else is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vmtax.targets.base import Capabilities, Target
from vmtax.targets.qemu import FORWARDED_PORTS
from vmtax.workloads.base import WorkloadError, free_port, remote_free_port

#: This machine as a guest on QEMU's user network sees it.
HOST_FROM_GUEST = "10.0.2.2"


@dataclass(frozen=True)
class Listener:
    """A port the target listens on: where it binds, and how this machine connects to it."""

    bind: str
    from_host: str


@dataclass(frozen=True)
class HostEnd:
    """Where this machine's end of a workload listens, and the address the target connects
    to for it."""

    bind_ip: str
    seen_as: str


def host_end(target: Target, what: str) -> HostEnd:
    caps = target.capabilities()
    if caps.kind == "local":
        return HostEnd("127.0.0.1", "127.0.0.1")
    if caps.kind == "ssh" and caps.link_addresses is not None:
        here, _ = caps.link_addresses()
        return HostEnd(here, here)
    _networked_guest(target, what)
    return HostEnd("127.0.0.1", HOST_FROM_GUEST)  # QEMU relays 10.0.2.2 to the loopback


def hostport(ip: str, port: int) -> str:
    """``ip:port``, with an IPv6 address in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def split_hostport(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def target_listeners(target: Target, count: int, what: str) -> list[Listener]:
    """``count`` ports the target can listen on that this machine can connect to. A guest
    is booted first (its forwards are chosen at boot)."""
    caps = target.capabilities()
    if caps.kind == "local":
        return [Listener(f"127.0.0.1:{p}", f"127.0.0.1:{p}") for p in _free_ports(count)]
    if caps.kind == "ssh" and caps.link_addresses is not None:
        _, there = caps.link_addresses()
        ports = _free_ports(count, lambda: remote_free_port(target))
        return [Listener(hostport(there, p), hostport(there, p)) for p in ports]
    guest = _networked_guest(target, what)
    if count > len(FORWARDED_PORTS):
        raise WorkloadError(
            f"{what} needs {count} ports in {target.name}; its network forwards "
            f"{len(FORWARDED_PORTS)}"
        )
    assert guest.forwards is not None
    forwards = guest.forwards()
    return [
        Listener(f"0.0.0.0:{port}", f"127.0.0.1:{forwards[port]}")
        for port in FORWARDED_PORTS[:count]
    ]


def _networked_guest(target: Target, what: str) -> Capabilities:
    caps = target.capabilities()
    if caps.kind != "guest" or caps.forwards is None:
        raise WorkloadError(
            f"{what} spans this machine and {target.name}, which is neither this machine, "
            "one of vmtax's guests nor an SSH host: give host= and port= of a netserver it "
            "can reach"
        )
    if caps.network != "user":
        raise WorkloadError(
            f"{target.name} has no network device for {what}: run with --guest-net user"
        )
    return caps


def _free_ports(count: int, find: Callable[[], int] = free_port) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = find()
        if port not in ports:
            ports.append(port)
    return ports

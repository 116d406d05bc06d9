"""How this machine and a target reach each other's TCP ports, for workloads whose two ends
run on different machines (net with ``peer=host`` or ``peer=from-host``, a relay ring spread
over the target and this machine).

Each target answers for itself (``Target.host_end``, ``Target.listeners``): this machine
uses its loopback for both ends; one of vmtax's L1 guests with a user network (``vmtax run
--guest-net user``) reaches this machine's loopback at 10.0.2.2, and this machine reaches the
guest's forwarded ports on loopback ports QEMU forwards; an SSH host listens on its address
of the SSH connection, on a port free there. Any other target refuses in one line.
"""

from __future__ import annotations

from vmtax.targets.base import Target
from vmtax.targets.qemu import HOST_FROM_GUEST  # noqa: F401 - the sweep's tiers import it here
from vmtax.targets.servers import HostEnd, Listener, hostport  # noqa: F401 - re-exported


def host_end(target: Target, what: str) -> HostEnd:
    """Where this machine's end of ``what`` listens, and the address the target uses."""
    return target.host_end(what)


def target_listeners(target: Target, count: int, what: str) -> list[Listener]:
    """``count`` ports the target can listen on that this machine can connect to. A guest
    is booted first (its forwards are chosen at boot)."""
    return target.listeners(count, what)


def split_hostport(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)

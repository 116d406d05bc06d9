"""Workloads: application benchmarks against real servers and tools, one plug-in per file.

``REGISTRY`` maps each name to its plug-in; ``run_lines`` is what the runner calls for every
step: a workload's name runs the workload, anything else goes to the agent unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from vmtax.contract import Fingerprint, ProbeInfo
from vmtax.doctor import Capability
from vmtax.targets import images
from vmtax.targets.agent import fingerprint
from vmtax.targets.base import Target
from vmtax.targets.servers import ServerError
from vmtax.workloads.base import Context, Invocation, Workload, WorkloadError
from vmtax.workloads.crypto import Crypto
from vmtax.workloads.hackbench import Hackbench
from vmtax.workloads.http import Http
from vmtax.workloads.memcached import Memcached
from vmtax.workloads.net import Net
from vmtax.workloads.oltp import Oltp
from vmtax.workloads.relay import Relay
from vmtax.workloads.static import Static

REGISTRY: dict[str, Workload] = {
    w.name: w
    for w in (Hackbench(), Oltp(), Http(), Memcached(), Net(), Relay(), Crypto(), Static())
}

#: memcached started as root switches to a user it looks up in /etc/passwd; PostgreSQL
#: refuses root, and oltp.sh runs it as postgres.
_USERS = {
    "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\npostgres:x:70:70:PostgreSQL:/tmp:/bin/sh\n",
    "etc/group": b"root:x:0:\npostgres:x:70:\n",
}


def package_capabilities() -> list[Capability]:
    """Each workload that needs packages, as one of doctor's capabilities (its recipe's)."""
    return [w.recipe.capability(w.name) for w in REGISTRY.values() if w.recipe.packages]


def image_contents() -> images.ImageContents:
    """What a guest image carries so that every workload can run in it: each workload's
    servers and tools, their files, and the users they switch to. Passed explicitly to
    whatever boots guests; importing this package changes no image."""
    files: dict[str, bytes] = {}
    for w in REGISTRY.values():
        files.update(w.guest_files)
    binaries = tuple(b for w in REGISTRY.values() for b in w.guest_binaries)
    return images.AGENT_ONLY.plus(binaries=binaries, files={**_USERS, **files})


_ENV: dict[int, Fingerprint] = {}
_ENV_LOCK = threading.Lock()


def infos() -> list[ProbeInfo]:
    """The workloads in the agent's ``list`` format (so the plan checks their parameters)."""
    return [w.info() for w in REGISTRY.values()]


def is_workload(name: str) -> bool:
    return name in REGISTRY


def run_lines(target: Target, args: list[str], timeout: float) -> Iterator[str]:
    """The stream of one planned run: the workload's, or the agent's for a probe."""
    if len(args) < 2 or args[0] != "run" or args[1] not in REGISTRY:
        yield from target.run_agent(args, timeout)
        return
    workload = REGISTRY[args[1]]
    ctx = Context(
        workload=workload,
        target=target,
        inv=Invocation.from_args(args, timeout),
        params={},
        env=lambda: _fingerprint(target),
    )
    try:
        ctx.params = workload.resolve(ctx.inv.params)
        # A run is whole or not at all: a server that fails half-way gives an error record,
        # never a stream with a second header.
        lines = list(workload.execute(ctx))
    except ServerError as exc:  # a WorkloadError, or a server its target could not place
        yield from ctx.header()
        yield ctx.end(f"{workload.name}: {exc.message}")
        return
    yield from lines


def _fingerprint(target: Target) -> Fingerprint:
    with _ENV_LOCK:
        if id(target) not in _ENV:
            _ENV[id(target)] = fingerprint(target)
        return _ENV[id(target)]


__all__ = [
    "REGISTRY",
    "Workload",
    "WorkloadError",
    "infos",
    "is_workload",
    "package_capabilities",
    "run_lines",
]

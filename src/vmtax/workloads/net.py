"""net: netperf's TCP_RR, TCP_STREAM and TCP_MAERTS, built into the agent (study C).

By default only the agent runs (its own server thread on the target's loopback, Nagle off),
so the workload runs on every target, guests included. ``peer=host`` puts the server on this
machine instead: vmtax starts ``vmtax-probe netserver`` on a free loopback port here, and the
client runs on the target, which for a guest means over its virtio-net NIC and QEMU's user
network (``vmtax run --guest-net user``; this machine is 10.0.2.2 from the guest).
``host``/``port`` point the client at any other agent's netserver (host to host).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.targets.base import find_agent
from vmtax.workloads.base import (
    Context,
    Param,
    Server,
    Workload,
    WorkloadError,
    free_port,
    guest_of,
    is_local,
)

#: This machine as a guest on QEMU's user network sees it.
HOST_FROM_GUEST = "10.0.2.2"


class Net(Workload):
    name = "net"
    summary = "one TCP transaction (rr) or one send/receive of `size` bytes (stream, maerts)"
    mechanism = "network path: virtual NIC (virtio-net/vhost), interrupts, IPIs and softirq"
    unit = "ns"
    better = "lower"
    throughput_unit = "trans/s or Mb/s"
    params = (
        Param("test", "rr", "TCP_RR, TCP_STREAM or TCP_MAERTS", ("rr", "stream", "maerts")),
        Param("size", 0, "bytes per message (0: netperf's 1 for rr, 16384 for stream/maerts)"),
        Param(
            "peer",
            "target",
            "where the server runs: target (loopback inside it) or host (this machine; "
            "a guest reaches it over its NIC, --guest-net user)",
            ("target", "host"),
        ),
        Param("host", "", "another agent's netserver; empty: as peer says"),
        Param("port", 0, "that netserver's port"),
    )
    agent_only = True
    default_iterations = 10_000_000
    default_duration = 1.0
    default_warmup = 100

    def execute(self, ctx: Context) -> Iterator[str]:
        p = ctx.params
        params: dict[str, bool | int | float | str] = {}
        if int(p["size"]):
            params["size"] = int(p["size"])
        probe = f"tcp_{p['test']}"
        if p["host"]:
            params |= {"host": p["host"], "port": int(p["port"])}
        elif p["peer"] == "host":
            yield from self._against_this_machine(ctx, probe, params)
            return
        yield from ctx.agent(probe, params)

    def _against_this_machine(
        self, ctx: Context, probe: str, params: dict[str, bool | int | float | str]
    ) -> Iterator[str]:
        guest = guest_of(ctx.target)
        if is_local(ctx.target):
            host = "127.0.0.1"
        elif guest is not None:
            if guest.spec.network != "user":
                raise WorkloadError(
                    f"{ctx.target.name} has no network device for peer=host: "
                    "run with --guest-net user"
                )
            host = HOST_FROM_GUEST
        else:
            raise WorkloadError(
                f"peer=host reaches this machine from itself or its guests only, not "
                f"{ctx.target.name}: give host= and port= of a netserver it can reach"
            )
        with Server("netserver") as srv:
            port = free_port()
            srv.start([str(find_agent()), "netserver", "--bind", f"127.0.0.1:{port}"], port=port)
            yield from ctx.agent(probe, {**params, "host": host, "port": port})

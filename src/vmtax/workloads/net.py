"""net: netperf's TCP_RR, TCP_STREAM and TCP_MAERTS, built into the agent (study C).

Only the agent runs (its own server thread on loopback, Nagle off), so the workload runs on
every target, guests included. ``host``/``port`` point it at another agent's
``vmtax-probe netserver`` instead (guest to host, host to host).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Workload


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
        Param("host", "", "another agent's netserver; empty: loopback inside the target"),
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
        if p["host"]:
            params |= {"host": p["host"], "port": int(p["port"])}
        yield from ctx.agent(f"tcp_{p['test']}", params)

"""net: netperf's TCP_RR, TCP_STREAM and TCP_MAERTS, built into the agent (study C).

By default only the agent runs (its own server thread on the target's loopback, Nagle off),
so the workload runs on every target, guests included. ``peer=host`` puts the server on this
machine instead: vmtax starts ``vmtax-probe netserver`` on a free loopback port here, and the
client runs on the target, which for a guest means over its virtio-net NIC and QEMU's user
network (``vmtax run --guest-net user``; this machine is 10.0.2.2 from the guest).
``peer=from-host`` turns it round: the target's agent runs the netserver (in a guest on a
port its user network forwards) and the client runs here, so the run times this machine
reaching a service in the target. With an SSH host as the target both run host to host,
each end on its address of the SSH connection. ``host``/``port`` point the client at any
other agent's netserver.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Iterator

from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget
from vmtax.workloads.base import (
    Context,
    Param,
    Recipe,
    Server,
    Workload,
    WorkloadError,
    free_port,
)
from vmtax.workloads.reach import host_end, hostport, split_hostport, target_listeners


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
            "where the server runs: target (loopback inside it), host (this machine; a "
            "guest reaches it over its NIC, --guest-net user) or from-host (the server in "
            "the target, the client here)",
            ("target", "host", "from-host"),
        ),
        Param("host", "", "another agent's netserver; empty: as peer says"),
        Param("port", 0, "that netserver's port"),
    )
    recipe = Recipe()  # the agent is client and server
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
        elif p["peer"] == "from-host":
            yield from self._from_this_machine(ctx, probe, params)
            return
        yield from ctx.agent(probe, params)

    def _against_this_machine(
        self, ctx: Context, probe: str, params: dict[str, bool | int | float | str]
    ) -> Iterator[str]:
        end = host_end(ctx.target, "peer=host")
        with Server("netserver") as srv:
            port = free_port()
            argv = [str(find_agent()), "netserver", "--bind", hostport(end.bind_ip, port)]
            srv.start(argv, port=port, host=end.bind_ip)
            yield from ctx.agent(probe, {**params, "host": end.seen_as, "port": port})

    def _from_this_machine(
        self, ctx: Context, probe: str, params: dict[str, bool | int | float | str]
    ) -> Iterator[str]:
        """The target's agent serves one client (in a thread, since its request lasts
        until the client is done) and this machine's agent is the client."""
        (listener,) = target_listeners(ctx.target, 1, "peer=from-host")
        ctx.boot_id()  # the run's boot, read before the netserver holds the target's agent
        request = ["netserver", "--bind", listener.bind, "--clients", "1"]
        said: queue.Queue[str | BaseException | None] = queue.Queue()

        def serve() -> None:
            try:
                for line in ctx.target.run_agent(request, ctx.left()):
                    said.put(line)
                said.put(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the client side
                said.put(exc)

        server = threading.Thread(target=serve, name="net-from-host", daemon=True)
        server.start()
        first = said.get(timeout=ctx.left())
        if not isinstance(first, str):
            why = first if isinstance(first, BaseException) else ctx.target.last_stderr
            raise WorkloadError(f"the netserver in {ctx.target.name} did not start: {why}")
        host, port = split_hostport(listener.from_host)
        here = LocalTarget(find_agent())
        try:
            yield from ctx.agent(probe, {**params, "host": host, "port": port}, on=here)
        finally:
            # A client that failed before connecting leaves the netserver waiting for it
            # (and the target's request open): one empty connection lets it finish.
            if server.is_alive():
                with contextlib.suppress(OSError):
                    socket.create_connection((host, port), timeout=2).close()
            server.join(timeout=ctx.left())

"""memcached: a real memcached driven by the agent's load generator (study C used memtier).

memcached starts on a free loopback port; the agent's ``memcache`` probe fills the key
space, then sends memtier's default mix (1 set : 10 gets, 32-byte values) over
``connections`` connections and times every request: ops/s and latency percentiles.

In a guest or on an SSH host the agent starts memcached for the run and stops it after: in
a guest on a fixed port, on an SSH host on a port its agent found free there.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

from vmtax.workloads.base import (
    Context,
    Param,
    Server,
    Workload,
    free_port,
    is_local,
    is_ssh,
    remote_free_port,
    servers_here,
)

#: The port memcached listens on inside a guest (nothing else runs there).
GUEST_PORT = 11211
MEMCACHED = "/usr/bin/memcached"


class Memcached(Workload):
    name = "memcached"
    summary = "one memcached get or set (text protocol), request sent to reply read"
    mechanism = "network path and server wake-ups: virtual NIC, interrupts, IPIs, scheduler"
    unit = "ns"
    better = "lower"
    throughput_unit = "ops/s"
    params = (
        Param("connections", 1, "concurrent connections"),
        Param("gets_per_set", 10, "gets per set"),
        Param("keys", 1000, "key space"),
        Param("value_size", 32, "bytes per value"),
        Param("threads", 2, "memcached worker threads"),
    )
    presets = {"study-c": {"connections": 8, "keys": 10000}}
    needs = ("memcached",)
    guest_binaries = (MEMCACHED,)
    default_iterations = 50000
    default_duration = 1.0
    default_warmup = 50

    def execute(self, ctx: Context) -> Iterator[str]:
        params = {k: ctx.params[k] for k in ("connections", "gets_per_set", "keys", "value_size")}
        flags = ["-l", "127.0.0.1", "-U", "0", "-m", "64", "-t", str(ctx.params["threads"])]
        servers_here(ctx)
        if is_local(ctx.target):
            with Server("memcached", owner="memcache") as srv:
                port = free_port()
                argv = [shutil.which("memcached") or MEMCACHED, *flags, "-p", str(port)]
                srv.start(argv, port=port)
                yield from ctx.agent("memcache", {"port": port, **params})
            return
        # The agent there starts it for the run and stops it after. memcached refuses to
        # run as root without -u (and ignores -u otherwise): a guest has no other user, an
        # SSH host has nobody.
        if is_ssh(ctx.target):
            port, user = remote_free_port(ctx.target), "nobody"
        else:
            port, user = GUEST_PORT, "root"
        cmd = " ".join([MEMCACHED, *flags, "-p", str(port), "-u", user])
        yield from ctx.agent("memcache", {"port": port, "server": cmd, **params})

"""memcached: a real memcached driven by the agent's load generator (study C used memtier).

memcached starts on a free loopback port; the agent's ``memcache`` probe fills the key
space, then sends memtier's default mix (1 set : 10 gets, 32-byte values) over
``connections`` connections and times every request: ops/s and latency percentiles.
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Server, Workload, free_port, is_local

#: The port memcached listens on inside a guest (nothing else runs there).
GUEST_PORT = 11211


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
    guest_binaries = ("/usr/bin/memcached",)
    default_iterations = 50000
    default_duration = 1.0
    default_warmup = 50

    def execute(self, ctx: Context) -> Iterator[str]:
        params = {k: ctx.params[k] for k in ("connections", "gets_per_set", "keys", "value_size")}
        server = ["memcached", "-l", "127.0.0.1", "-U", "0", "-m", "64"]
        server += ["-t", str(ctx.params["threads"])]
        if not is_local(ctx.target):
            # In a guest nobody but the agent can start it: the agent runs it for the
            # session and stops it after (as root there, hence -u root).
            cmd = " ".join([*server, "-p", str(GUEST_PORT), "-u", "root"])
            yield from ctx.agent("memcache", {"port": GUEST_PORT, "server": cmd, **params})
            return
        with Server("memcached", owner="memcache") as srv:
            port = free_port()
            srv.start([*server, "-p", str(port)], port=port)
            yield from ctx.agent("memcache", {"port": port, **params})

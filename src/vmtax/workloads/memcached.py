"""memcached: a real memcached driven by the agent's load generator (study C used memtier).

memcached starts on a free loopback port; the agent's ``memcache`` probe fills the key
space, then sends memtier's default mix (1 set : 10 gets, 32-byte values) over
``connections`` connections and times every request: ops/s and latency percentiles.

The target places it (``Target.place_server``): here vmtax starts it; in a guest or on an SSH
host the agent starts memcached for the run and stops it after, in a guest on a fixed port,
on an SSH host on a port its agent found free there.
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import (
    Context,
    Needs,
    Param,
    ParamValue,
    Recipe,
    ServerSpec,
    Spot,
    Workload,
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
    recipe = Recipe(
        programs=("memcached",),
        packages=("memcached",),
        fedora=("memcached",),
        binaries=(MEMCACHED,),
        needs=Needs(server=True),
    )
    default_iterations = 50000
    default_duration = 1.0
    default_warmup = 50

    def execute(self, ctx: Context) -> Iterator[str]:
        params: dict[str, ParamValue] = {
            k: ctx.params[k] for k in ("connections", "gets_per_set", "keys", "value_size")
        }
        flags = ["-l", "127.0.0.1", "-U", "0", "-m", "64", "-t", str(ctx.params["threads"])]
        with ctx.target.place_server(server(flags)) as placed:
            params |= {"port": placed.port, **placed.agent_params}
            yield from ctx.agent("memcache", params)


def server(flags: list[str]) -> ServerSpec:
    """memcached with ``flags``. It refuses to run as root without -u (and ignores -u
    otherwise): a guest has no other user than root, an SSH host has nobody, and here it is
    started as memcache when vmtax is root."""

    def command(spot: Spot) -> list[str]:
        return [MEMCACHED, *flags, "-p", str(spot.port), "-u", spot.user]

    return ServerSpec("memcached", command=command, owner="memcache", guest_port=GUEST_PORT)

"""relay: study D's relay ring, in the agent (N forwarders and a master over TCP, Nagle off).

The master times each round trip of a 4-byte message; a run's values in order are one row
of the study's run x iteration mesh, which ``vmtax artifacts`` searches for periodic lines
and cross-run spikes.

``spread=target`` keeps the whole ring in the target, on its loopback. ``spread=host``
spreads it over the target and this machine, one relay on each in turn: the master and the
forwarders at even places run in the target's agent, those at odd places are
``vmtax-probe relay-forward`` processes here, so every hop crosses between the two (in a
guest, over its NIC: ``vmtax run --guest-net user``).
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.targets.base import find_agent
from vmtax.workloads.base import Context, Param, Recipe, Server, Workload, free_port
from vmtax.workloads.reach import host_end, hostport, target_listeners


class Relay(Workload):
    name = "relay"
    summary = "one round trip of a 4-byte message through the ring"
    mechanism = "network stack wake-ups: loopback TCP, scheduler, interrupts, timers"
    unit = "ns"
    better = "lower"
    params = (
        Param("relays", 1, "forwarders besides the master"),
        Param("interval_us", 0, "microseconds between the master's sends (0: back to back)"),
        Param(
            "spread",
            "target",
            "the whole ring in the target, or one relay in turn on the target and this machine",
            ("target", "host"),
        ),
    )
    presets = {"study-d": {"relays": 1}}
    recipe = Recipe()  # the agent is every node of the ring
    default_iterations = 10_000
    default_duration = 1.0
    default_warmup = 100

    def execute(self, ctx: Context) -> Iterator[str]:
        params: dict[str, bool | int | float | str] = {
            "relays": int(ctx.params["relays"]),
            "interval_us": int(ctx.params["interval_us"]),
        }
        if ctx.params["spread"] == "target":
            yield from ctx.agent("relay", params)
            return
        n = int(ctx.params["relays"])
        places = n + 1
        here = places // 2 + places % 2  # the master and the forwarders at even places
        listeners = target_listeners(ctx.target, here, "relay spread=host")
        end = host_end(ctx.target, "relay spread=host")
        with Server("relay-forward") as srv:
            away = []
            for place in range(1, places, 2):
                # The next place is the target's (even): its listener, as this machine sees it.
                nxt = listeners[((place + 1) % places) // 2].from_host
                port = free_port()
                bind = hostport(end.bind_ip, port)
                argv = [str(find_agent()), "relay-forward", "--bind", bind, "--next", nxt]
                srv.start(argv, port=port, host=end.bind_ip)
                away.append(hostport(end.seen_as, port))
            params |= {"away": ",".join(away), "listen": ",".join(x.bind for x in listeners)}
            yield from ctx.agent("relay", params)

"""relay: study D's relay ring, in the agent (N forwarders and a master over loopback TCP).

The master times each round trip of a 4-byte message; a run's values in order are one row
of the study's run x iteration mesh, which ``vmtax artifacts`` searches for periodic lines
and cross-run spikes.
"""

from __future__ import annotations

from collections.abc import Iterator

from vmtax.workloads.base import Context, Param, Workload


class Relay(Workload):
    name = "relay"
    summary = "one round trip of a 4-byte message through the ring"
    mechanism = "network stack wake-ups: loopback TCP, scheduler, interrupts, timers"
    unit = "ns"
    better = "lower"
    params = (
        Param("relays", 1, "forwarders besides the master"),
        Param("interval_us", 0, "microseconds between the master's sends (0: back to back)"),
    )
    presets = {"study-d": {"relays": 1}}
    agent_only = True
    default_iterations = 10_000
    default_duration = 1.0
    default_warmup = 100

    def execute(self, ctx: Context) -> Iterator[str]:
        yield from ctx.agent(
            "relay",
            {"relays": int(ctx.params["relays"]), "interval_us": int(ctx.params["interval_us"])},
        )

"""hackbench (rt-tests): groups of senders and receivers passing messages (study C).

One value is one hackbench execution's own ``Time:`` (converted to ns), read by the agent's
``exec`` probe, so that the same measurement runs on this machine and in a guest whose
image carries hackbench. A run repeats it until its iterations or duration are reached.
Study C's 100 groups x 500 loops is the ``study-c`` preset; the default is small so that a
quick suite stays quick.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from vmtax.workloads.base import Context, Param, Recipe, Workload


class Hackbench(Workload):
    name = "hackbench"
    summary = "one hackbench execution (the time hackbench reports)"
    mechanism = "scheduler: wake-ups, context switches and IPIs between many tasks"
    unit = "ns"
    better = "lower"
    params = (
        Param("groups", 4, "groups of 20 senders and 20 receivers"),
        Param("loops", 100, "messages each sender sends"),
        Param("mode", "process", "tasks are processes or threads", ("process", "thread")),
        Param("ipc", "socket", "socketpairs or pipes", ("socket", "pipe")),
    )
    presets = {"study-c": {"groups": 100, "loops": 500}}
    recipe = Recipe(
        programs=("hackbench",),
        packages=("rt-tests",),
        fedora=("rt-tests",),
        binaries=("/usr/bin/hackbench",),
    )
    default_iterations = 10
    default_duration = 3.0
    default_warmup = 1

    @staticmethod
    def argv(params: Mapping[str, object]) -> list[str]:
        argv = ["hackbench", "-g", str(params["groups"]), "-l", str(params["loops"])]
        argv += ["-T"] if params["mode"] == "thread" else ["-P"]
        if params["ipc"] == "pipe":
            argv.append("-p")
        return argv

    def execute(self, ctx: Context) -> Iterator[str]:
        cmd = " ".join(self.argv(ctx.params))
        yield from ctx.agent("exec", {"cmd": cmd, "time_line": "Time:"})


def parse_time(text: str) -> float:
    """Seconds from hackbench's ``Time:`` line (for running it by hand)."""
    for line in text.splitlines():
        if line.startswith("Time:"):
            return float(line.split(":", 1)[1])
    raise ValueError("hackbench printed no Time: line")

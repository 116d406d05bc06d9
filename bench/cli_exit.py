"""The console script's exit against the ordinary one, on the same command.

`vmtax` ends through ``vmtax.entry.exit_now``: the atexit handlers run and the streams are
flushed, but the interpreter's teardown of the modules the CLI loaded is skipped. Each
round runs one command both ways, alternating which goes first, and reads each process's
wall time and CPU time (user + system, from its rusage); the figures are the ratios
(console script / ordinary exit) of the medians, with every side's min/median/max.

Example:
    python bench/cli_exit.py --rounds 10
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from vmtax.store import Store

WAYS = {
    "ordinary exit": "from vmtax.cli import main; main()",
    "console script": "from vmtax.entry import main; main()",
}


def one(code: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process running ``code`` with ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{args}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{os.path.join(tmp, 'b.db')}"
        Store.open(db).close()  # an empty store for the command to read
        got: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
        for r in range(opts.rounds):
            order = list(WAYS) if r % 2 == 0 else list(reversed(WAYS))
            for way in order:
                got[way].append(one(WAYS[way], ["db", "info", "--db", db]))
    print(f"`vmtax db info`, {opts.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print("seconds, min / median / max:")
    for way, runs in got.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"  {way:15} wall {spread(walls)}   CPU {spread(cpus)}")
    med = {way: [statistics.median(x[i] for x in got[way]) for i in (0, 1)] for way in got}
    fast, slow = med["console script"], med["ordinary exit"]
    print(f"ratio of medians, console script / ordinary exit: wall {fast[0] / slow[0]:.3f}, "
          f"CPU {fast[1] / slow[1]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

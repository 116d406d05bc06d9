"""CPU seconds of `vmtax report`, beside `vmtax compare` of the same runs in the same round.

`vmtax report` is timed as a user runs it (a new process; its worker processes included),
and so is `vmtax compare` of the same selectors: the comparison is the statistics a report
cannot do without, so the ratio says what the rest of the report (artifact checks, figures,
HTML) costs, whatever the machine's speed and load. CPU seconds (user + system) move less
with the load of other work than wall seconds; both are printed.

Without --db the store is made first: a two-level experiment of 12 probes x 6 runs a side
and about 370,000 samples, the shape of the README's worked example (`vmtax run --levels
L0,L1`: 144 runs, 39 figures), from vmtax.testing.report_store's synthetic runs. Every one
of its probes carries a planted period (every 97th iteration twice as slow). A period that
is real cost the period test its family's early look in shuffles (19,200 for all 96 of a
report's tests; stats.artifacts.early_look), which made that store the worst case (13.6
CPU-s); a period this clear is now decided by its tail bound without shuffles (5.3 CPU-s).
A worked example's store with three periods found went from 15.8 to 7.3 CPU-s. Give --db
for one.

Run: python bench/report_cpu.py [--db URL] [--selector exp=latest] [--baseline level=L0]
     [--rounds 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import vmtax
from vmtax.store import Store
from vmtax.testing.report_store import populate

VMTAX = [sys.executable, "-c", "from vmtax.cli import main; main()"]
PROBES = (
    *("cpuid", "syscall", "write", "timer", "wakeup", "pingpong", "ctxswitch"),
    *("pagefault", "cpu", "threads", "memory", "io"),
)


def cpu_of(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, its worker processes included) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([*VMTAX, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def worked_like(url: str) -> None:
    """A store shaped like the worked example's: 2 levels x 12 probes x 6 runs."""
    with Store.open(url) as store:
        populate(store, levels=("L0", "L1"), probes=PROBES, runs=6, iterations=2_600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="store URL (default: a worked-example-like store is made)")
    parser.add_argument("--selector", default="exp=latest")
    parser.add_argument("--baseline", default="level=L0")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    # Compiled bytecode, as an installed vmtax has it: under PYTHONDONTWRITEBYTECODE a
    # changed module would otherwise be compiled again in every round.
    package = Path(vmtax.__file__).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    with tempfile.TemporaryDirectory(prefix="vmtax-report-cpu-") as tmp:
        url = opts.db or f"sqlite:///{Path(tmp) / 'worked.db'}"
        if not opts.db:
            worked_like(url)
        out = Path(tmp) / "report.html"
        given = [opts.selector, "--db", url, "--baseline", opts.baseline]
        report = ["report", *given, "-o", str(out)]
        compare = ["compare", *given]
        rows: dict[str, list[tuple[float, float]]] = {"report": [], "compare": []}
        for _ in range(opts.rounds):
            # Alternating, so that a drift in the machine's load reaches both alike.
            rows["report"].append(cpu_of(report))
            rows["compare"].append(cpu_of(compare))
    print(f"{'command':<10} {'CPU s (median)':>15} {'wall s (median)':>16}  CPU min-max, rounds")
    med = {}
    for name, times in rows.items():
        cpu = [c for _, c in times]
        med[name] = statistics.median(cpu)
        wall = statistics.median(w for w, _ in times)
        each = ", ".join(f"{c:.2f}" for c in cpu)
        print(
            f"vmtax {name:<8} {med[name]:>15.2f} {wall:>16.2f}  "
            f"{min(cpu):.2f}-{max(cpu):.2f}: {each}"
        )
    print(f"report / compare, CPU: {med['report'] / med['compare']:.2f}")


if __name__ == "__main__":
    main()

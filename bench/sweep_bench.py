"""Benchmark: the default `vmtax sweep` (QEMU TCG guests, steps 0.5 to 2.5:1 of 1-vCPU
guests on this machine's CPUs, 3 replicates in rounds of fresh boots, 5 s warm-up, 15 s
window, 3 s samples). Target: <= 10 min on 2 cores.

The default sweep runs twice (each with its own random order), and the bench says whether
the two knees agree within their intervals (the intervals overlap and each contains the
other's knee).

Peer measured in the same run, to report a ratio rather than a machine-dependent time: the
same sweep at level L0 (the agent as processes on this machine, no guest to boot), whose
wall time is the floor set by the timings themselves (15 units x 20 s).

With ``--triplet`` it also times the default triplet sweep (study B's web, app and db
guests, 1 to 4 triplets, the same timings), against the same budget; it has no L0 form, so
its peer is the default L1 sweep of the same run.

It prints each sweep's table, the knee, and the load average before and after (the machine
may be shared; other load raises host CPU utilisation and lowers the guests' throughput).

Run: python bench/sweep_bench.py [--triplet] [STORE]   (VMTAX_PROBE names the agent; without
STORE the store is temporary)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 600.0
VMTAX = shutil.which("vmtax") or str(Path(sys.executable).parent / "vmtax")


def sweep(db: str, *extra: str) -> tuple[float, dict]:
    cmd = [VMTAX, "sweep", "--db", db, *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    show = [VMTAX, "sweep", "show", "latest", "--format", "json"]
    out = subprocess.run([*show, "--db", db], check=True, capture_output=True, text=True)
    return wall, json.loads(out.stdout)


def where(knee: dict | None) -> str:
    if not knee:
        return "none"
    at = "no ratio (bend at the sweep's end)" if knee["ratio"] is None else f"{knee['ratio']:.3g}:1"
    if knee["low"] is None:
        return f"{at} (no interval)"
    return f"{at} [{knee['low']:.3g}, {knee['high']:.3g}], as a step {knee['step']:g}:1"


def line(name: str, data: dict) -> str:
    flat = data["flat"]["kind"] if data["flat"] else "-"
    steps = "; ".join(
        f"{s['ratio']:g}: {s['throughput']['mean'] or 0:,.0f}/s "
        f"(replicates {', '.join(f'{v:,.0f}' for v in s['throughput']['replicate_means'])}) "
        f"at host CPU {100 * (s['utilisation']['host'] or 0):.0f}%"
        for s in data["steps"]
    )
    return f"{name}: knee {where(data['knee'])} ({flat}); {steps}"


def agree(a: dict | None, b: dict | None) -> str:
    """Whether two sweeps' knees agree within their intervals."""
    if not a or not b:
        return "cannot tell (a sweep found no knee)" if (a or b) else "both found no knee"
    if a["low"] is None or b["low"] is None:
        return "cannot tell (no interval)"
    if a["ratio"] is None or b["ratio"] is None:  # a bend at the sweep's end: intervals only
        return "yes" if a["low"] <= b["high"] and b["low"] <= a["high"] else "no"
    inside = a["low"] <= b["ratio"] <= a["high"] and b["low"] <= a["ratio"] <= b["high"]
    return "yes" if inside else "no"


def main() -> None:
    print(f"load average before: {os.getloadavg()}")
    args = sys.argv[1:]
    triplet = "--triplet" in args
    args = [a for a in args if a != "--triplet"]
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        db = args[0] if args else f"sqlite:///{Path(tmp) / 'bench.db'}"
        t_l1, l1 = sweep(db)
        t_again, again = sweep(db)
        t_l0, l0 = sweep(db, "--level", "L0")
        t_tr, tr = sweep(db, "--workload", "triplet") if triplet else (0.0, {})
    print(f"load average after: {os.getloadavg()}")
    print(line("L1 (TCG guests)", l1))
    print(line("L1 again", again))
    print(line("L0 (processes)", l0))
    for name, t in (("default sweep", t_l1), ("again", t_again)):
        verdict = "ok" if t <= BUDGET_S else "OVER"
        print(f"{name}: {t:.0f} s (budget {BUDGET_S:.0f} s: {verdict})")
    print(f"knees agree within their intervals: {agree(l1['knee'], again['knee'])}")
    print(f"L0 peer: {t_l0:.0f} s; ratio L1/L0 = {t_l1 / t_l0:.2f}")
    if triplet:
        print(line("triplet (TCG guests)", tr))
        verdict = "ok" if t_tr <= BUDGET_S else "OVER"
        print(f"triplet sweep: {t_tr:.0f} s (budget {BUDGET_S:.0f} s: {verdict})")
        print(f"ratio triplet / default L1 sweep = {t_tr / t_l1:.2f}")


if __name__ == "__main__":
    main()

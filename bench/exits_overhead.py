"""What recording exit profiles costs the measured guest: cpuid in L2 (under L1's KVM on the
nested-KVM testbed) with the recorder on vs off, in the same run.

One L1+L2 stack is booted once. Each round runs the agent's cpuid probe once per mode in
L2, in an order that rotates from round to round so that drift of the (shared,
TCG-emulated) machine hits all modes alike:

- ``off``: no recorder;
- ``counts``: bracketed by ``vmtax-probe exits start --no-time`` / ``exits stop`` on L1's
  host-side port (one histogram trigger on kvm_exit);
- ``timed``: the same with handling times (the five triggers ``vmtax run --exits`` uses).

A run's figure is its median CPUID cost (the runs' means swing with the machine's
interruptions, their medians much less). A round's ratio is a recorder mode's median over
the ``off`` median of the same round; the table gives the median of those paired ratios with
a 95% bootstrap interval (scipy.stats.bootstrap), their min and max, and what the recorder
adds per recorded exit: (on - off) / (exits per CPUID). That last figure is what makes the
overhead predictable for another workload: overhead = added cycles per exit x exits per
unit of work.

An ``exits start`` or ``stop`` that fails ends the rounds; what was measured before it is
still reported, and the command exits 1.

Example:
    VMTAX_PROBE=target/x86_64-unknown-linux-gnu/release/vmtax-probe \
        python bench/exits_overhead.py --rounds 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
from scipy import stats

from vmtax.targets.base import TargetError
from vmtax.targets.levels import level_targets

MODES = {"off": None, "counts": ["--mount", "--no-time"], "timed": ["--mount"]}


def cpuid_run(target, iterations: int) -> tuple[float, int]:
    """Median CPUID cycles of one run and the CPUIDs it executed (warm-up included)."""
    args = ["run", "cpuid", "--runs", "1", "--iterations", str(iterations), "--duration", "60"]
    lines = list(target.run_agent(args, 600))
    header = json.loads(lines[0])
    summary = next(json.loads(x) for x in lines if x.startswith('{"type":"run_summary"'))
    return float(summary["median"]), int(summary["n"]) + int(header.get("warmup") or 0)


def recorded_exits(side, target, flags: list[str], iterations: int) -> tuple[float, int, int]:
    """One cpuid run between ``exits start`` and ``exits stop`` on the host side: its median,
    the exits recorded (all reasons) and the CPUIDs executed."""
    list(side.run_agent(["exits", "start", "--qemu", "auto", *flags], 120))
    med, cpuids = cpuid_run(target, iterations)
    prof = json.loads("".join(side.run_agent(["exits", "stop"], 120)))
    return med, sum(x["count"] for x in prof["reasons"]), cpuids


def paired_ratio(on: list[float], off: list[float]) -> tuple[float, float, float]:
    """Median of the per-round ratios on/off with a 95% bootstrap interval."""
    logs = np.log(np.asarray(on) / np.asarray(off))
    if len(logs) < 3:
        m = float(np.exp(np.median(logs)))
        return m, float("nan"), float("nan")
    ci = stats.bootstrap(
        (logs,),
        np.median,
        confidence_level=0.95,
        method="percentile",
        n_resamples=4999,
        random_state=1,
    ).confidence_interval
    return float(np.exp(np.median(logs))), float(np.exp(ci.low)), float(np.exp(ci.high))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=3000)
    a = ap.parse_args()
    (target,) = level_targets(["L2"], accel="tcg", inner_accel="kvm")
    t0 = time.monotonic()
    target.prepare()
    print(f"L1+L2 booted in {time.monotonic() - t0:.0f} s", flush=True)
    side = target.host_sides()["L1"]
    medians: dict[str, list[float]] = {m: [] for m in MODES}
    exits_per_cpuid: dict[str, list[float]] = {m: [] for m in MODES if MODES[m]}
    failure = None
    try:
        cpuid_run(target, 500)  # warm the guest's page cache, the agent and L1's translations
        # The agent's start-up executes CPUIDs and exits of its own: a recorded run of the
        # fewest iterations (two) gives them, to be taken off each run's exits.
        base_exits, base_cpuids = recorded_exits(side, target, MODES["counts"], 2)[1:]
        order = list(MODES)
        for r in range(a.rounds):
            row: dict[str, float] = {}
            for mode in order[r % 3 :] + order[: r % 3]:
                if MODES[mode] is None:
                    row[mode] = cpuid_run(target, a.iterations)[0]
                    continue
                row[mode], n, cpuids = recorded_exits(side, target, MODES[mode], a.iterations)
                exits_per_cpuid[mode].append((n - base_exits) / (cpuids - base_cpuids))
            for mode, med in row.items():  # a round counts whole or not at all
                medians[mode].append(med)
            print(
                f"round {r + 1}: " + ", ".join(f"{m} {v:,.0f}" for m, v in row.items()), flush=True
            )
    except TargetError as exc:
        failure = f"round {len(medians['off']) + 1}: {exc}"
        print(f"stopped: {failure}", file=sys.stderr)
    finally:
        target.close()
    if not medians["off"]:
        return 1
    off = medians["off"]
    print()
    print(
        "| recorder | rounds | median cycles per CPUID (min..max) | paired ratio to off [95% CI] "
        "| ratio min..max | exits per CPUID | cycles added per exit |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, values in medians.items():
        spread = f"{statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"
        if MODES[mode] is None:
            print(f"| {mode} | {len(values)} | {spread} | 1 | | | |")
            continue
        ratio, low, high = paired_ratio(values, off)
        per_round = [v / o for v, o in zip(values, off, strict=True)]
        epc = statistics.median(exits_per_cpuid[mode])
        added = (statistics.median(values) - statistics.median(off)) / epc
        print(
            f"| {mode} | {len(values)} | {spread} | {ratio:.3f} [{low:.3f}, {high:.3f}] "
            f"| {min(per_round):.2f}..{max(per_round):.2f} | {epc:.2f} | {added:,.0f} |"
        )
    if failure:
        print(f"\nended early: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

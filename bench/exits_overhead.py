"""What recording exit profiles costs the measured guest: cpuid in L2 (under L1's KVM on the
nested-KVM testbed) with each recorder mode, in the same run.

One L1+L2 stack is booted once. Each round runs the agent's cpuid probe once per mode in
L2, in an order that rotates from round to round so that drift of the (shared,
TCG-emulated) machine hits all modes alike:

- ``none``: no recorder;
- ``counts``: ``vmtax run --exits`` (the default): KVM's own per-vCPU counters read through
  L2's QEMU with QMP ``query-stats`` (``vmtax-probe exits stats`` on L1's host-side port)
  before and after the run; nothing is traced;
- ``trace``: ``vmtax run --exits=trace``: bracketed by ``vmtax-probe exits start`` /
  ``exits stop`` (the five tracefs histogram triggers: exits by reason with handling times).

A run's figure is its median CPUID cost (the runs' means swing with the machine's
interruptions, their medians much less). A round's ratio is a mode's median over the
``none`` median of the same round; the table gives the median of those paired ratios with
a 95% bootstrap interval over rounds (scipy.stats.bootstrap; rounds are the unit, all on
one boot), their min and max, and what the recorder adds per recorded exit:
(on - none) / (exits per CPUID). That last figure is what makes the overhead predictable for
another workload: overhead = added cycles per exit x exits per unit of work.

A run of L2's CPUID loop here is in one of two states about 1.8x apart (in every mode, more
often the busier the machine; docs/exits.md), and a round whose runs fall in different
states gives a ratio near 0.55 or 1.8, far wider than the 2% in question. So the table also
splits the runs into two states (``slow_threshold``) and gives,
for each recorder: how many of its runs and of the ``none`` runs were slow, with Fisher's
exact test of the difference (does the recorder bring the slow state on?), and the paired
ratio over the rounds whose two runs were in the same state (what it costs within a state).
``--modes none,counts`` leaves tracing out, for more rounds in the same time.

An ``exits`` request that fails ends the rounds; what was measured before it is still
reported, and the command exits 1. ``--readings DIR`` keeps the first round's two
``exits stats`` readings (the JSON the agent printed) there.

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
from pathlib import Path

import numpy as np
from scipy import stats

from vmtax.hostprof import kvmstats
from vmtax.targets.base import TargetError
from vmtax.targets.levels import level_targets

MODES = ("none", "counts", "trace")


def cpuid_run(target, iterations: int) -> tuple[float, int]:
    """Median CPUID cycles of one run and the CPUIDs it executed (warm-up included)."""
    args = ["run", "cpuid", "--runs", "1", "--iterations", str(iterations), "--duration", "60"]
    lines = list(target.run_agent(args, 600))
    header = json.loads(lines[0])
    summary = next(json.loads(x) for x in lines if x.startswith('{"type":"run_summary"'))
    return float(summary["median"]), int(summary["n"]) + int(header.get("warmup") or 0)


def _reading(side) -> dict:
    return json.loads("".join(side.run_agent(["exits", "stats", "--qemu", "auto"], 120)))


def recorded_exits(side, target, mode: str, iterations: int, keep: list | None = None):
    """One cpuid run recorded in ``mode`` on the host side: its median, the exits recorded
    (all reasons or categories) and the CPUIDs executed."""
    if mode == "counts":
        before = _reading(side)
        med, cpuids = cpuid_run(target, iterations)
        after = _reading(side)
        if keep is not None:
            keep += [before, after]
        return med, kvmstats.profile(before, after)["hits"], cpuids
    list(side.run_agent(["exits", "start", "--qemu", "auto", "--mount"], 120))
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


#: Two groups of run medians whose geometric means are this far apart are two states.
STATE_GAP = 1.3


def slow_threshold(medians: list[float]) -> float | None:
    """Where the runs split into a fast and a slow state: of the splits of the sorted log
    medians into two groups, the one with the least spread within the groups (Otsu's, exact
    in one dimension: every split is tried, where k-means could stop at a local one), at the
    geometric middle between its two runs; None when its groups' geometric means are less
    than STATE_GAP apart."""
    logs = np.sort(np.log(np.asarray(medians, dtype=float)))
    if logs.size < 4:
        return None
    within = [logs[:k].var() * k + logs[k:].var() * (logs.size - k) for k in range(1, logs.size)]
    k = int(np.argmin(within)) + 1
    if np.exp(logs[k:].mean() - logs[:k].mean()) < STATE_GAP:
        return None
    return float(np.exp((logs[k - 1] + logs[k]) / 2))


def state_split(
    on: list[float], off: list[float], threshold: float | None
) -> tuple[int, int, float, tuple[float, float, float], int]:
    """Slow runs with the recorder and without, Fisher's exact p of that difference, the
    paired ratio over the rounds whose two runs are in the same state, and their count."""
    if threshold is None:
        return 0, 0, 1.0, paired_ratio(on, off), len(on)
    slow_on = sum(v > threshold for v in on)
    slow_off = sum(v > threshold for v in off)
    n = len(on)
    _, p = stats.fisher_exact([[slow_on, n - slow_on], [slow_off, n - slow_off]])
    same = [(a, b) for a, b in zip(on, off, strict=True) if (a > threshold) == (b > threshold)]
    ratio = paired_ratio([a for a, _ in same], [b for _, b in same]) if same else (np.nan,) * 3
    return slow_on, slow_off, float(p), ratio, len(same)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help="the recorders to interleave, none among them (default: none,counts,trace)",
    )
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--readings", type=Path, help="keep the first two exits stats readings here")
    a = ap.parse_args()
    modes = tuple(m for m in MODES if m in a.modes.split(","))
    if "none" not in modes or len(modes) < 2 or set(a.modes.split(",")) - set(MODES):
        ap.error(f"--modes must name none and at least one of counts, trace: {a.modes!r}")
    (target,) = level_targets(["L2"], accel="tcg", inner_accel="kvm")
    t0 = time.monotonic()
    target.prepare()
    print(f"L1+L2 booted in {time.monotonic() - t0:.0f} s", flush=True)
    side = target.host_sides()["L1"]
    medians: dict[str, list[float]] = {m: [] for m in modes}
    exits_per_cpuid: dict[str, list[float]] = {m: [] for m in modes if m != "none"}
    kept: list = []
    failure = None
    try:
        cpuid_run(target, 500)  # warm the guest's page cache, the agent and L1's translations
        # The agent's start-up executes CPUIDs and exits of its own: a recorded run of the
        # fewest iterations (two) gives them, per mode, to be taken off each run's exits.
        base = {m: recorded_exits(side, target, m, 2)[1:] for m in modes if m != "none"}
        order = list(modes)
        for r in range(a.rounds):
            row: dict[str, float] = {}
            k = r % len(order)
            for mode in order[k:] + order[:k]:
                if mode == "none":
                    row[mode] = cpuid_run(target, a.iterations)[0]
                    continue
                keep = kept if mode == "counts" and not kept else None
                row[mode], n, cpuids = recorded_exits(side, target, mode, a.iterations, keep)
                base_exits, base_cpuids = base[mode]
                exits_per_cpuid[mode].append((n - base_exits) / (cpuids - base_cpuids))
            for mode, med in row.items():  # a round counts whole or not at all
                medians[mode].append(med)
            print(
                f"round {r + 1}: " + ", ".join(f"{m} {v:,.0f}" for m, v in row.items()), flush=True
            )
    except TargetError as exc:
        failure = f"round {len(medians['none']) + 1}: {exc}"
        print(f"stopped: {failure}", file=sys.stderr)
    finally:
        target.close()
    if a.readings is not None and kept:
        a.readings.mkdir(parents=True, exist_ok=True)
        for name, reading in zip(("before", "after"), kept, strict=True):
            (a.readings / f"kvm_stats_{name}.json").write_text(json.dumps(reading, indent=1))
    if not medians["none"]:
        return 1
    off = medians["none"]
    print()
    print(
        "| recorder | rounds | median cycles per CPUID (min..max) | paired ratio to none "
        "[95% CI] | ratio min..max | exits per CPUID | cycles added per exit |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, values in medians.items():
        spread = f"{statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"
        if mode == "none":
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
    threshold = slow_threshold([v for values in medians.values() for v in values])
    print()
    if threshold is None:
        print(f"One state: no split of the runs' medians into groups {STATE_GAP}x apart.")
    else:
        print(f"Two states, split at {threshold:,.0f} cycles per CPUID.")
        print()
        print(
            "| recorder | slow runs, with / without | Fisher's exact p | rounds in one state "
            "| paired ratio to none in one state [95% CI] |"
        )
        print("|---|---:|---:|---:|---:|")
    for mode, values in medians.items():
        if mode == "none" or threshold is None:
            continue
        if paired_ratio(values, off)[1] > np.sqrt(STATE_GAP):
            # Its own cost is of the order of the states' gap: it moves runs across the split.
            print(f"| {mode} | (its own cost moves its runs across the split) | | | |")
            continue
        slow_on, slow_off, p, (ratio, low, high), same = state_split(values, off, threshold)
        print(
            f"| {mode} | {slow_on} / {slow_off} of {len(values)} | {p:.3g} | {same} "
            f"| {ratio:.3f} [{low:.3f}, {high:.3f}] |"
        )
    if failure:
        print(f"\nended early: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

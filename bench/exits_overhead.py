"""What recording exit profiles costs the measured guest: cpuid in L2 (under L1's KVM on the
nested-KVM testbed) with the recorder on vs off, in the same run.

One L1+L2 stack is booted once. Each round runs the agent's cpuid probe three times in L2:
bracketed by `vmtax-probe exits start` / `exits stop` on L1's host-side port with handling
times (the five triggers `vmtax run --exits` uses), with counts only (`--no-time`, one
trigger), and without, in rotating order so that drift of the (shared, TCG-emulated) machine
hits all alike. The figure is the ratio of the medians of the per-round mean CPUID cost to
the recorder-off median; 1.00 = no overhead. Timings on a
shared 2-core machine are noisy: read the spread of the per-round ratios too.

Example:
    VMTAX_PROBE=target/x86_64-unknown-linux-gnu/release/vmtax-probe \
        python bench/exits_overhead.py --rounds 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from vmtax.targets.levels import level_targets


def cpuid_mean(target, iterations: int) -> tuple[float, int]:
    """Mean CPUID cycles of one run and its iterations (warm-up included)."""
    args = ["run", "cpuid", "--runs", "1", "--iterations", str(iterations), "--duration", "60"]
    lines = list(target.run_agent(args, 600))
    summary = next(json.loads(x) for x in lines if x.startswith('{"type":"run_summary"'))
    return float(summary["mean"]), int(summary["n"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=3000)
    a = ap.parse_args()
    (target,) = level_targets(["L2"], accel="tcg", inner_accel="kvm")
    t0 = time.monotonic()
    target.prepare()
    print(f"L1+L2 booted in {time.monotonic() - t0:.0f} s")
    side = target.host_sides()["L1"]
    modes = {"timed": ["--mount"], "counts": ["--mount", "--no-time"], "off": None}
    means: dict[str, list[float]] = {m: [] for m in modes}
    exits: list[int] = []
    try:
        cpuid_mean(target, 500)  # warm the guest's page cache and the agent
        order = list(modes)
        for r in range(a.rounds):
            for mode in order[r % 3 :] + order[: r % 3]:  # rotate who goes first
                flags = modes[mode]
                if flags is not None:
                    list(side.run_agent(["exits", "start", "--qemu", "auto", *flags], 120))
                mean, _ = cpuid_mean(target, a.iterations)
                if flags is not None:
                    prof = json.loads("".join(side.run_agent(["exits", "stop"], 120)))
                    exits.append(sum(x["count"] for x in prof["reasons"] if x["code"] == 0x72))
                means[mode].append(mean)
                print(f"round {r + 1} {mode:>6}: {mean:,.0f} cycles per CPUID")
    finally:
        target.close()
    off = statistics.median(means["off"])
    print()
    print("| recorder | median cycles per CPUID | ratio to off | rounds |")
    print("|---|---:|---:|---:|")
    for mode, values in means.items():
        med = statistics.median(values)
        print(f"| {mode} | {med:,.0f} | {med / off:.3f} | {len(values)} |")
    print()
    print(f"CPUID exits recorded per recorded run: {', '.join(map(str, exits))}")


if __name__ == "__main__":
    main()

"""How precise is `vmtax-probe run cpuid` at its defaults, next to a peer in the same run?

Each trial runs the agent's default cpuid invocation and records its wall time and the 95%
Student t interval of the mean over its runs (the interval `vmtax describe` reports), as a
percentage of the mean. Right after it, the peer runs: the plain C rdtsc loop of CPUID from
probes_vs_peers.py, in the same shape (as many batches as the agent made runs, 10,000 CPUIDs
each, one mean per batch), on the same CPU. The peer has no per-operation timing, no
overhead subtraction and no agent around it, so the ratio of the two half-widths says how
much imprecision the agent adds; what is left is the machine's own run-to-run spread.

The same interval over the run *medians* is printed beside it: a shift of the median across
runs is the host's CPUID cost moving; a wide mean interval with steady medians is rare long
samples (interrupts, host preemption) landing in some runs and not others. So is the interval
that treats every CPUID of the invocation as independent ("pooled"), for context only: it is
what a per-iteration summary would claim, and it ignores that the cost drifts between runs.

Example:
    python bench/cpuid_precision.py --trials 10 \
        --agent target/x86_64-unknown-linux-gnu/release/vmtax-probe
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from probes_vs_peers import build_cpuid_ref, sh
from vmtax.stats.describe import mean_interval

TARGET_PCT = 1.0
PER_BATCH = 10_000


def half_width_pct(values: list[float]) -> float:
    """Half-width of the 95% t interval of the mean that `vmtax describe` reports, as a
    percentage of that mean."""
    mean, _, _, _, high = mean_interval(pd.Series(values))
    return 100.0 * (high - mean) / mean


def agent_trial(agent: str, cpu: int) -> tuple[float, list[float], list[float], list[float]]:
    """Wall seconds, run means, run medians and all measured values of one default run."""
    start = time.monotonic()
    out = sh(["taskset", "-c", str(cpu), agent, "run", "cpuid"])
    wall = time.monotonic() - start
    records = [json.loads(line) for line in out.splitlines()]
    runs = [r for r in records if r["type"] == "run_summary"]
    values = [v for r in records if r["type"] == "samples" and not r["warmup"] for v in r["values"]]
    return wall, [r["mean"] for r in runs], [r["median"] for r in runs], values


def peer_trial(exe: Path, batches: int, cpu: int) -> list[float]:
    out = sh(["taskset", "-c", str(cpu), str(exe), str(batches), str(PER_BATCH)])
    return [float(x) for x in out.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", default=os.environ.get("VMTAX_PROBE", "vmtax-probe"))
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--cpu", type=int, default=1, help="CPU both sides run on")
    a = ap.parse_args()
    if os.uname().machine != "x86_64":
        print("cpuid is an x86 probe; nothing to measure here", file=sys.stderr)
        return 0
    agent = shutil.which(a.agent) or a.agent
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_cpuid_ref(Path(tmp))
        print(f"{'trial':>5} {'wall s':>7} {'runs':>5} {'mean':>8} {'CI% mean':>9} "
              f"{'CI% median':>11} {'CI% pooled':>11} {'peer CI%':>9} {'ratio':>6}")  # fmt: skip
        for i in range(a.trials):
            wall, means, medians, values = agent_trial(agent, a.cpu)
            peer = peer_trial(exe, len(means), a.cpu)
            ours, theirs = half_width_pct(means), half_width_pct(peer)
            rows.append((wall, ours, half_width_pct(medians), theirs))
            print(f"{i:5d} {wall:7.2f} {len(means):5d} {statistics.fmean(means):8.0f} "
                  f"{ours:9.2f} {half_width_pct(medians):11.2f} {half_width_pct(values):11.2f} "
                  f"{theirs:9.2f} "
                  f"{ours / theirs:6.2f}")  # fmt: skip
    walls, ours, medians, peers = zip(*rows, strict=True)
    met = sum(w <= 1.0 and h <= TARGET_PCT for w, h in zip(walls, ours, strict=True))
    peer_met = sum(h <= TARGET_PCT for h in peers)
    ratio = statistics.median(o / p for o, p in zip(ours, peers, strict=True))
    med = statistics.median
    print(f"max wall {max(walls):.2f} s; median CI half-width: agent {med(ours):.2f}%,"
          f" over run medians {med(medians):.2f}%, peer {med(peers):.2f}%;"
          f" median ratio agent/peer {ratio:.2f}")  # fmt: skip
    print(f"target <= {TARGET_PCT}% in <= 1 s: agent met it in {met} of {len(rows)} trials, "
          f"the peer loop in {peer_met} of {len(rows)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

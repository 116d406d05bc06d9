"""Compare vmtax-probe probes with established peers, measured in the same run.

Each line prints the probe's figure, the peer's figure and their ratio (probe / peer).
Targets: cpu 1 +- 0.05, memory 1 +- 0.10, timer 1 +- 0.10, wakeup 1 +- 0.15, cpuid 1 +- 0.05.

Example: python bench/probes_vs_peers.py --agent target/x86_64-unknown-linux-gnu/release/vmtax-probe

Peers: sysbench (cpu, memory), cyclictest (rt-tests), perf bench sched pipe (linux-perf), and
for cpuid a reference loop written in C and compiled with cc at bench time. The reference is
C rather than inline asm in this script or in the agent so that it shares no code and no
compiler with the agent: a second, independent implementation of the same measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CPUID_REF_C = r"""
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

/* Plain rdtsc loop: time `per` back-to-back CPUIDs with two RDTSC reads and divide.
   No per-operation fencing or overhead subtraction: the loop amortizes both. Prints one
   cycles-per-CPUID figure per batch. */
int main(int argc, char **argv) {
    int batches = atoi(argv[1]), per = atoi(argv[2]);
    unsigned a, b, c, d;
    for (int i = 0; i < batches; i++) {
        unsigned long long t0 = __rdtsc();
        for (int j = 0; j < per; j++) {
            __cpuid_count(0, 0, a, b, c, d);
            __asm__ volatile("" : : "r"(a), "r"(b), "r"(c), "r"(d));
        }
        unsigned long long t1 = __rdtsc();
        printf("%.3f\n", (double)(t1 - t0) / per);
    }
    return 0;
}
"""


def sh(args: list[str], timeout: float = 120) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def agent_runs(agent: str, probe: str, *args: str) -> list[dict]:
    out = sh([agent, "run", probe, *args])
    recs = [json.loads(line) for line in out.splitlines()]
    return [r for r in recs if r["type"] == "run_summary"]


def agent_values(agent: str, probe: str, *args: str) -> list[float]:
    out = sh([agent, "run", probe, *args])
    vals: list[float] = []
    for line in out.splitlines():
        r = json.loads(line)
        if r["type"] == "samples" and not r.get("warmup"):
            vals.extend(r["values"])
    return vals


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs)


def cmp_cpu(agent: str, seconds: float) -> tuple[float, float]:
    runs = agent_runs(
        agent, "cpu", "--runs", "1", "--iterations", "1000000",
        "--duration", str(seconds), "--cpus", "1",
    )  # fmt: skip
    ours = mean([s["throughput"] for s in runs])
    # sysbench's own default is --cpu-max-prime=10000; the probe's is 20000: pass it.
    out = sh(
        ["taskset", "-c", "1", "sysbench", "cpu", "--threads=1", "--cpu-max-prime=20000",
         f"--time={max(1, round(seconds))}", "run"]
    )  # fmt: skip
    peer = float(re.search(r"events per second:\s*([\d.]+)", out).group(1))
    return ours, peer


def cmp_memory(agent: str, oper: str, seconds: float) -> tuple[float, float]:
    runs = agent_runs(
        agent, "memory", "--runs", "1", "--iterations", "1000000",
        "--duration", str(seconds), "--param", "block_kb=1024",
        "--param", f"oper={oper}", "--cpus", "1",
    )  # fmt: skip
    ours = mean([s["throughput"] for s in runs])
    out = sh(
        ["taskset", "-c", "1", "sysbench", "memory", "--threads=1", "--memory-block-size=1M",
         "--memory-total-size=10000G", f"--memory-oper={oper}",
         f"--time={max(1, round(seconds))}", "run"]
    )  # fmt: skip
    peer = float(re.search(r"\(([\d.]+) MiB/sec\)", out).group(1))
    return ours, peer


def histogram_median(text: str) -> float:
    """The median of cyclictest's -h histogram ("<us> <count>" lines, 1 us buckets), in us;
    overflows (beyond the histogram) count as above every bucket."""
    buckets = [(int(us), int(n)) for us, n in re.findall(r"^(\d{6})\s+(\d+)\s*$", text, re.M)]
    over = re.search(r"^# Histogram Overflows:\s*(\d+)", text, re.M)
    total = sum(n for _, n in buckets) + (int(over.group(1)) if over else 0)
    seen = 0
    for us, n in buckets:
        seen += n
        if 2 * seen >= total:
            return float(us)
    raise RuntimeError("cyclictest: the median lies beyond the histogram (raise -h)")


def cmp_timer(agent: str, loops: int, idle: str) -> tuple[float, float, float, float]:
    """(probe median, probe mean, cyclictest median, cyclictest average), microseconds.

    Medians are compared with medians: under load a few late wake-ups pull a mean up, on
    either side, and the mean then says more about the load than about the timer. The
    cyclictest median comes from its histogram (-h, 1 us buckets).

    Same interval as cyclictest's default (1 ms), same policy (SCHED_OTHER), same CPU, and the
    same idle behaviour: cyclictest holds /dev/cpu_dma_latency at 0 unless given --laptop,
    which is the probe's idle=poll; --laptop is idle=halt.
    """
    vals = agent_values(
        agent, "timer", "--runs", "1", "--iterations", str(loops), "--duration", "60",
        "--param", "delay_us=1000", "--param", f"idle={idle}", "--cpus", "1",
    )  # fmt: skip
    laptop = ["--laptop"] if idle == "halt" else []
    out = sh(["cyclictest", *laptop, "-q", "-t1", "-a", "1", "-i", "1000", "-l", str(loops),
              "-h", "20000"])  # fmt: skip
    avg = re.search(r"^# Avg Latencies:\s*(\d+)", out, re.M) or re.search(r"Avg:\s*(\d+)", out)
    return (
        statistics.median(vals) / 1000.0,
        mean(vals) / 1000.0,
        histogram_median(out),
        float(avg.group(1)),
    )


def perf_sched_pipe(loops: int, cpus: tuple[int, ...]) -> float:
    """`perf bench sched pipe` per-op microseconds, its two processes on `cpus`.

    perf has no affinity option, and left to the scheduler its two processes often share one
    CPU: a pipe and a context switch, with no IPI and no idle CPU. With two CPUs given, the
    child is moved to the second CPU as soon as it exists, so the round trip crosses CPUs as
    the wakeup probe's does; the few loops before the move are a negligible part of the total.
    """
    cmd = ["perf", "bench", "sched", "pipe", "-l", str(loops)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        os.sched_setaffinity(proc.pid, {cpus[0]})
        if len(cpus) > 1:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            deadline = time.monotonic() + 10
            while not children.read_text().split():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("perf bench sched pipe: its second process never appeared")
                time.sleep(0.0002)
            os.sched_setaffinity(int(children.read_text().split()[0]), {cpus[1]})
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"perf bench sched pipe failed: {err.strip()[-300:]}")
    return float(re.search(r"([\d.]+)\s+usecs/op", out).group(1))


def cmp_wakeup(agent: str, loops: int, cpus: tuple[int, ...]) -> tuple[float, float]:
    listed = ",".join(map(str, cpus))
    vals = agent_values(
        agent, "wakeup", "--runs", "1", "--iterations", str(loops), "--duration", "60",
        "--cpus", listed,
    )  # fmt: skip
    return mean(vals) / 1000.0, perf_sched_pipe(loops, cpus)


def build_cpuid_ref(workdir: Path) -> Path:
    """The C reference loop, compiled once into `workdir`."""
    src, exe = workdir / "cpuid_ref.c", workdir / "cpuid_ref"
    if not exe.exists():
        src.write_text(CPUID_REF_C)
        sh(["cc", "-O2", "-o", str(exe), str(src)])
    return exe


def cmp_cpuid(agent: str, workdir: Path) -> tuple[float, float]:
    """Median cycles per CPUID over blocks of 100, on both sides.

    The C loop can only give the mean of each batch of 100 CPUIDs, so the agent's per-CPUID
    values are cut into consecutive blocks of 100 and averaged the same way: a median of
    per-CPUID values would leave out the interrupts that every batch mean carries.
    """
    exe = build_cpuid_ref(workdir)
    ref = [float(x) for x in sh(["taskset", "-c", "1", str(exe), "100", "100"]).split()]
    ours = agent_values(agent, "cpuid", "--runs", "1", "--iterations", "10000", "--cpus", "1")
    blocks = [mean(ours[i : i + 100]) for i in range(0, len(ours) - 99, 100)]
    return statistics.median(blocks), statistics.median(ref)


COMPARISONS = ["cpu", "memory", "timer", "wakeup", "cpuid"]

Row = tuple[str, str, float, float, float, float | None]


def rounds(n: int, measure) -> tuple[float, float, float]:
    """Alternate probe and peer `n` times; medians of each side and of the round ratios.

    On a shared machine the CPU share a benchmark gets drifts over seconds: pairing each
    probe measurement with a peer measurement taken right after it cancels most of that.
    """
    return summarize([measure() for _ in range(n)])


def summarize(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    ours = [p[0] for p in pairs]
    peer = [p[1] for p in pairs]
    ratio = statistics.median(o / q for o, q in pairs)
    return statistics.median(ours), statistics.median(peer), ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", default=os.environ.get("VMTAX_PROBE", "vmtax-probe"))
    ap.add_argument("--seconds", type=float, default=1.0, help="per throughput measurement")
    ap.add_argument("--rounds", type=int, default=5, help="alternations of probe and peer")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--only", nargs="+", choices=COMPARISONS, default=COMPARISONS,
                    help="run only these comparisons")  # fmt: skip
    a = ap.parse_args()
    agent = shutil.which(a.agent) or a.agent
    rows: list[Row] = []
    n, sec = a.rounds, a.seconds

    def row(name: str, unit: str, res: tuple[float, float, float], target: float | None) -> None:
        rows.append((name, unit, *res, target))

    with tempfile.TemporaryDirectory() as tmp:
        if "cpu" in a.only:
            row("cpu events/s vs sysbench cpu", "events/s",
                rounds(n, lambda: cmp_cpu(agent, sec)), 0.05)  # fmt: skip
        for oper in ("read", "write") if "memory" in a.only else ():
            row(f"memory {oper} 1M vs sysbench", "MiB/s",
                rounds(n, lambda o=oper: cmp_memory(agent, o, sec)), 0.10)  # fmt: skip
        timer_modes = (("poll", "cyclictest"), ("halt", "cyclictest --laptop"))
        for idle, peer in timer_modes if "timer" in a.only else ():
            timer = [cmp_timer(agent, 500, idle) for _ in range(n)]
            row(f"timer idle={idle} median vs {peer} median", "us",
                summarize([(t[0], t[2]) for t in timer]), 0.10)  # fmt: skip
            row(f"(timer idle={idle} mean vs {peer} avg)", "us",
                summarize([(t[1], t[3]) for t in timer]), None)  # fmt: skip
        if "wakeup" in a.only:
            row("wakeup (CPUs 0,1) vs perf sched pipe", "us",
                rounds(n, lambda: cmp_wakeup(agent, 5000, (0, 1))), 0.15)  # fmt: skip
            row("(wakeup, CPU 1 only, vs perf on CPU 1)", "us",
                rounds(n, lambda: cmp_wakeup(agent, 5000, (1,))), None)  # fmt: skip
        if "cpuid" in a.only and os.uname().machine == "x86_64":
            row("cpuid vs C rdtsc loop", "cycles",
                rounds(n, lambda: cmp_cpuid(agent, Path(tmp))), 0.05)  # fmt: skip
    if a.json:
        keys = ("comparison", "unit", "probe", "peer", "ratio", "tolerance")
        print(json.dumps([dict(zip(keys, r, strict=True)) for r in rows]))
        return 0
    print(f"{n} alternating rounds; probe and peer are medians, ratio the median round ratio")
    width = max([len("comparison"), *(len(r[0]) for r in rows)])
    print(f"{'comparison':{width}} {'unit':9} {'probe':>12} {'peer':>12} {'ratio':>7}  target")
    for name, unit, ours, peer, ratio, tol in rows:
        if tol is None:
            target = "(context)"
        else:
            target = f"1+-{tol:.2f} " + ("ok" if abs(ratio - 1) <= tol else "OFF")
        print(f"{name:{width}} {unit:9} {ours:12.2f} {peer:12.2f} {ratio:7.3f}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Host-side sampling during a sweep window, from /proc (no library reads these counters).

- host CPU utilisation: busy / all jiffies of the ``cpu`` line of /proc/stat (1.0 = every CPU
  busy, as study B's "100% = all CPUs");
- per guest (its QEMU process): CPU time (utime + stime), resident memory (VmRSS), major
  faults, and the run-queue wait of its vCPU threads (/proc/PID/task/*/schedstat, field 2;
  QEMU names them "CPU n/..."; all threads for other processes): the time they were ready
  but not running. That is exactly what a KVM guest sees
  as steal time; a TCG guest has no steal clock, so vmtax measures it from the host side too.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcSnap:
    cpu_s: float = 0.0
    majflt: int = 0
    rss_kb: int = 0
    wait_ns: int = 0
    alive: bool = False


@dataclass
class Snapshot:
    t: float
    busy: int
    total: int
    procs: dict[int, ProcSnap] = field(default_factory=dict)


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def proc_snapshot(pid: int) -> ProcSnap:
    snap = ProcSnap()
    base = Path(f"/proc/{pid}")
    try:
        stat = (base / "stat").read_text()
        rest = stat.rsplit(")", 1)[1].split()
        # Fields after the command: state=0 ... majflt=9, utime=11, stime=12 (0-based here).
        snap.majflt = int(rest[9])
        snap.cpu_s = (int(rest[11]) + int(rest[12])) / _TICK
        for line in (base / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                snap.rss_kb = int(line.split()[1])
                break
        waits: dict[bool, int] = {True: 0, False: 0}
        for task in (base / "task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                # QEMU names its vCPU threads "CPU n/TCG" or "CPU n/KVM".
                vcpu = (task / "comm").read_text().startswith("CPU ")
                waits[vcpu] += int((task / "schedstat").read_text().split()[1])
        snap.wait_ns = waits[True] or waits[False]
        snap.alive = True
    except (OSError, ValueError, IndexError):
        snap.alive = False
    return snap


def snapshot(pids: list[int]) -> Snapshot:
    busy, total = cpu_jiffies()
    return Snapshot(time.monotonic(), busy, total, {p: proc_snapshot(p) for p in pids})


def host_util(a: Snapshot, b: Snapshot) -> float | None:
    total = b.total - a.total
    return (b.busy - a.busy) / total if total > 0 else None


def guest_delta(a: Snapshot, b: Snapshot, pid: int, vcpus: int, ncpus: int) -> dict[str, float]:
    """One guest's share of the interval: CPU (fraction of all host CPUs), run-queue wait
    (fraction of its vCPUs' time), RSS and major faults per second."""
    pa, pb = a.procs.get(pid), b.procs.get(pid)
    dt = b.t - a.t
    if not pa or not pb or not pa.alive or not pb.alive or dt <= 0:
        return {}
    return {
        "cpu": (pb.cpu_s - pa.cpu_s) / (dt * ncpus),
        "wait": (pb.wait_ns - pa.wait_ns) / 1e9 / (dt * max(vcpus, 1)),
        "rss_mb": pb.rss_kb / 1024,
        "major_faults": (pb.majflt - pa.majflt) / dt,
    }

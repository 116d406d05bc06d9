"""A run's exits from KVM's own per-vCPU counters (``vmtax run --exits``, the default mode):
two readings of ``vmtax-probe exits stats`` (QMP ``query-stats`` to the guest's QEMU), one
before and one after the run, and their difference. Nothing is traced, so the run pays
nothing for it; what it gives is counts by category, not by exit reason, and no handling time.

KVM counts every exit in ``exits``; a few counters count one kind of exit each, and those
are the categories (``CATEGORIES``). What they leave of ``exits`` is ``other_exits``: on a
CPUID loop, the CPUID exits, which KVM counts nowhere else.
"""

from __future__ import annotations

from typing import Any

#: KVM vCPU counters that each count one kind of VM exit, by the name stored as its reason
#: (its group is in ``groups``). ``signal_exits`` and ``request_irq_exits`` are left out: they
#: count returns to QEMU, not exits from the guest, so they are no part of ``exits``.
CATEGORIES: tuple[str, ...] = (
    "halt_exits", "irq_exits", "irq_window_exits", "nmi_window_exits", "io_exits", "mmio_exits",
    "hypercalls", "nested_run",
)  # fmt: skip
#: The rest of ``exits``: the exits none of the categories counts.
OTHER = "other_exits"
#: exit_counts is keyed by (profile, code); counters get codes far from any SVM/VMX exit code.
CODE_BASE = 1 << 32
CODES: dict[str, int] = {name: CODE_BASE + i for i, name in enumerate((*CATEGORIES, OTHER))}


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per vCPU (its QOM path) and counter: ``after - before`` of two ``exits stats``
    readings of the same QEMU."""
    was = {v["path"]: v["stats"] for v in before.get("vcpus") or []}
    out: dict[str, dict[str, int]] = {}
    for vcpu in after.get("vcpus") or []:
        old = was.get(vcpu["path"], {})
        out[vcpu["path"]] = {k: int(v) - int(old.get(k, 0)) for k, v in vcpu["stats"].items()}
    return out


def profile(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The profile (the shape ``exits stop`` prints, names instead of exit codes) of the
    window between two readings: counts by category summed over the vCPUs, the difference
    of every counter per vCPU in ``vcpus``."""
    problems: list[str] = []
    if before.get("qemu") != after.get("qemu"):
        problems.append(
            f"the readings are of two QEMU processes ({before.get('qemu')} and {after.get('qemu')})"
        )
    per_vcpu = difference(before, after)
    total = {
        name: sum(c.get(name, 0) for c in per_vcpu.values()) for name in (*CATEGORIES, "exits")
    }
    if any(n < 0 for c in per_vcpu.values() for n in c.values()):
        problems.append("a counter went down between the readings (the vCPU was re-created?)")
    exits = total.pop("exits")
    rest = exits - sum(total.values())
    if rest < 0:
        problems.append(f"the categories sum to {rest} more than KVM's exits")
    counts = {**total, OTHER: max(rest, 0)}
    reasons = [
        {"code": CODES[name], "name": name, "count": n} for name, n in counts.items() if n > 0
    ]
    return {
        "type": "exits",
        "isa": after.get("isa") or before.get("isa"),
        "reasons": reasons,
        "hits": exits,
        "dropped": 0,
        "complete": not problems,
        "problems": problems,
        "window_ns": int(after.get("time_ns", 0)) - int(before.get("time_ns", 0)) or None,
        "vcpus": per_vcpu,
    }

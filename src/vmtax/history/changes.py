"""What changed in the environment between two experiments, from their configurations'
fingerprints: the fields a tax depends on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (dotted path in the fingerprint, the name a change is shown with). The agent records the
#: kernel, the CPU model and its microcode (where the kernel shows one), the hypervisor it
#: sees, the clock source and THP; vmtax adds the version of the QEMU that runs a guest level
#: (``targets.agent.fingerprint``).
FIELDS: tuple[tuple[str, str], ...] = (
    ("kernel", "kernel"),
    ("qemu.version", "QEMU"),
    ("cpu.model", "CPU"),
    ("cpu.microcode", "microcode"),
    ("hypervisor.vendor", "hypervisor"),
    ("clocksource", "clocksource"),
    ("thp", "THP"),
    ("cpu.logical_cpus", "CPUs"),
    ("agent_version", "agent"),
)

#: Fields that fingerprints stored before they were recorded lack, and that some machines
#: never show (a guest kernel without a microcode line): compared only when both
#: fingerprints carry them, so the first experiment that records one is not a change.
WHEN_BOTH = frozenset({"qemu.version", "cpu.microcode"})


def value_at(fingerprint: Mapping[str, Any] | None, path: str) -> str | None:
    """The value at a dotted path, as text; None when any part is missing."""
    node: Any = fingerprint or {}
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if node is None else str(node)


def changed(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, where: str = ""
) -> list[str]:
    """``kernel 6.1 → 6.6`` for every field that differs; ``where`` names the side (``L0``).
    A field missing on one side is a change when the other side has it, except the fields
    of ``WHEN_BOTH``."""
    out = []
    for path, name in FIELDS:
        a, b = value_at(before, path), value_at(after, path)
        if path in WHEN_BOTH and (a is None or b is None):
            continue
        if a != b:
            label = f"{where} {name}".strip()
            out.append(f"{label} {a or '(none)'} → {b or '(none)'}")
    return out

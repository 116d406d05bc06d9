"""Which ``--exits`` modes this machine has, and in one line why not.

- ``counts`` (the default): KVM's own per-vCPU counters, read through the QEMU that runs the
  guest with QMP ``query-stats``. It needs QEMU 7.1 or later and a kernel with KVM's binary
  statistics (``KVM_GET_STATS_FD``, Linux 5.14 or later) where KVM runs the measured guest.
- ``trace``: tracefs histogram triggers on ``kvm_exit`` / ``kvm_entry`` (exits by reason and
  their handling time). It needs a kernel with ``CONFIG_HIST_TRIGGERS`` and
  ``CONFIG_SYNTH_EVENTS``.

The kernel that runs KVM is this machine's (an L1 guest under its KVM) or the guest kernel
vmtax boots (L2 under L1's KVM, the testbed); QEMU is this machine's in both, as the guest
images carry it. A mode is there when QEMU and one of those kernels have what it needs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from vmtax.errors import UsageError, VmtaxError
from vmtax.targets.images import find_kernel

MODES: tuple[str, ...] = ("counts", "trace")
QUERY_STATS_QEMU = (7, 1)
STATS_FD_LINUX = (5, 14)


def parse_mode(value: str | bool | None) -> str:
    """``--exits`` as given (``True`` alone, ``counts``, ``trace``) as a mode, or "" for none
    (``None``, ``False``); anything else is a usage error."""
    if value is None or value is False:
        return ""
    if value is True:
        return "counts"
    mode = str(value).strip().lower()
    if mode not in MODES:
        raise UsageError(f"--exits must be {' or '.join(MODES)} (alone: counts), got {value!r}")
    return mode


def _version(text: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def qemu_version() -> tuple[int, int] | None:
    """The version of this machine's qemu-system-x86_64, or None without one."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        return None
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _version(out.stdout.partition("version")[2])


def kernels() -> dict[str, str]:
    """The kernels that can run KVM for vmtax: where -> release."""
    out = {"this machine": os.uname().release}
    with contextlib.suppress(VmtaxError):  # no guest kernel: only this machine's
        out["the guest kernel"] = find_kernel()[0].name.removeprefix("vmlinuz-")
    return out


def _has_hist_triggers(where: str, release: str) -> bool:
    if where == "this machine" and Path("/sys/kernel/tracing/synthetic_events").exists():
        return True
    config = Path("/boot") / f"config-{release}"
    text = config.read_text(errors="replace") if config.is_file() else ""
    return "CONFIG_HIST_TRIGGERS=y" in text and "CONFIG_SYNTH_EVENTS=y" in text


def _dotted(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def availability(mode: str) -> tuple[bool, str]:
    """(whether ``mode`` works here, what it stands on or the one line why not)."""
    found = kernels()
    if mode == "counts":
        qemu = qemu_version()
        if qemu is None:
            return False, "no qemu-system-x86_64 (its QMP query-stats reads KVM's counters)"
        if qemu < QUERY_STATS_QEMU:
            return False, (
                f"QEMU {_dotted(qemu)} has no QMP query-stats "
                f"({_dotted(QUERY_STATS_QEMU)} or later has it)"
            )
        new = {w: r for w, r in found.items() if (_version(r) or (0, 0)) >= STATS_FD_LINUX}
        if not new:
            have = " and ".join(f"{r} ({w})" for w, r in found.items())
            return False, (
                f"Linux {have} has no KVM binary statistics (KVM_GET_STATS_FD, "
                f"{_dotted(STATS_FD_LINUX)} or later)"
            )
        on = " and ".join(f"{r} ({w})" for w, r in new.items())
        return True, f"QEMU {_dotted(qemu)} query-stats; KVM statistics in Linux {on}"
    if mode == "trace":
        ok = [f"{r} ({w})" for w, r in found.items() if _has_hist_triggers(w, r)]
        if not ok:
            return False, (
                "no kernel here has histogram triggers (CONFIG_HIST_TRIGGERS, CONFIG_SYNTH_EVENTS)"
            )
        return True, f"tracefs histogram triggers in Linux {' and '.join(ok)}"
    raise ValueError(mode)


def require(mode: str) -> None:
    """Refuse (usage error) a mode this machine lacks, in one line."""
    ok, why = availability(mode)
    if not ok:
        raise UsageError(f"--exits={mode} is not available here: {why}")

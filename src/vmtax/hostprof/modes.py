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
#: The measured levels a recorder can be chosen for: the guests vmtax boots (L0 has no host
#: side, docs/exits.md).
LEVELS: tuple[str, ...] = ("L1", "L2", "L3")
#: The key of ``parse_modes``' answer for every level not named.
EVERY = "*"
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


def parse_modes(value: str | bool | None) -> dict[str, str]:
    """``--exits`` as given, as the recorder of each measured level: ``{"*": mode}`` for one
    mode for every level (``True`` alone, ``counts``, ``trace``); per level from
    ``LEVEL=MODE`` pairs, e.g. ``L2=trace,L3=counts`` (a bare mode among them is every other
    level's); ``{}`` for none. A level or mode not known, or a level given twice, is a usage
    error in one line."""
    if value is None or value is False or value is True or "=" not in str(value):
        mode = parse_mode(value)
        return {EVERY: mode} if mode else {}
    out: dict[str, str] = {}
    for item in str(value).split(","):
        level, eq, mode = (x.strip() for x in item.strip().partition("="))
        key = level.upper() if eq else EVERY
        mode = (mode if eq else level).lower()
        if eq and key not in LEVELS:
            raise UsageError(
                f"--exits {value}: unknown level {level!r} (levels: {', '.join(LEVELS)}; "
                "L0 has no host side)"
            )
        if mode not in MODES:
            raise UsageError(
                f"--exits {value}: the mode of {key if eq else 'every level'} must be "
                f"{' or '.join(MODES)}, got {mode!r}"
            )
        if key in out:
            raise UsageError(f"--exits {value}: {key if eq else 'a bare mode'} is given twice")
        out[key] = mode
    return out


def mode_for(modes: dict[str, str], level: str) -> str:
    """The recorder mode of a target at ``level`` ("": not recorded)."""
    return modes.get(level.upper(), modes.get(EVERY, ""))


def stored_modes(modes: dict[str, str]) -> str | dict[str, str]:
    """What an experiment stores: one mode as before (``counts``, ``trace``, ""), per-level
    modes as their mapping."""
    return modes.get(EVERY, "") if set(modes) <= {EVERY} else dict(modes)


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

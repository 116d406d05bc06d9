"""Choose the accelerator: KVM only after a real test guest has booted under it, else TCG.

``/dev/kvm`` existing is not proof that guests run (a nested or broken KVM can hang a
Linux guest right after real mode). So a tiny guest whose /init prints a marker is booted
under ``accel=kvm`` with a short timeout.

Only a verdict from a real boot attempt is cached, keyed by everything it depends on: the
QEMU binary (path, size, modification time), the guest kernel image, /dev/kvm (its device
numbers), the host kernel's release and its boot id. Installing or upgrading QEMU, a new
kernel image or a reboot therefore asks again. "QEMU is not installed" or "no guest kernel"
is never cached: it is said, and checked anew next time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vmtax.errors import UsageError, VmtaxError
from vmtax.targets.base import QemuStartError, TargetError
from vmtax.targets.images import build_accel_test, cache_dir, find_kernel
from vmtax.targets.qemu import GuestSpec, QemuGuest

MARKER = "VMTAX-ACCEL-TEST-OK"
#: A working KVM boots the test guest in about a second; TCG needs about five.
KVM_TEST_TIMEOUT = float(os.environ.get("VMTAX_KVM_TEST_TIMEOUT", "15"))


@dataclass(frozen=True)
class Verdict:
    kvm_ok: bool
    reason: str
    seconds: float | None = None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


QEMU = "qemu-system-x86_64"


def _file_key(path: Path) -> list[object]:
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def verdict_key(qemu: Path, kernel: Path) -> str:
    """A digest of what a KVM verdict depends on (see the module docstring)."""
    kvm = os.stat("/dev/kvm")
    parts = {
        "qemu": _file_key(qemu.resolve()),
        "kernel": _file_key(kernel.resolve()),
        "dev_kvm": [os.major(kvm.st_rdev), os.minor(kvm.st_rdev)],
        "host_kernel": os.uname().release,
        "boot_id": boot_id(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _verdict_file(key: str) -> Path:
    return cache_dir().parent / f"accel-{key}.json"


def test_guest_boots(accel: str, timeout: float, *, cpu: str | None = None) -> Verdict:
    """Boot the marker guest under ``accel`` (with the CPU model real guests get, unless
    ``cpu`` says otherwise); ok only if the marker reaches the console in time."""
    image = build_accel_test()
    spec = GuestSpec(vcpus=1, memory_mb=256, accel=accel, pin=False, cpu=cpu, scratch_mb=0)
    guest = QemuGuest(image, spec, agent_args=[])
    t0 = time.monotonic()
    try:
        guest.start()
        while time.monotonic() - t0 < timeout:
            if MARKER in guest.console_text():
                return Verdict(True, f"test guest booted under {accel}", time.monotonic() - t0)
            if not guest.running():
                return Verdict(False, f"QEMU exited under accel={accel}: {guest.console_tail(2)}")
            time.sleep(0.1)
        tail = guest.console_tail(1)
        shown = "its console stayed empty" if tail == "(empty)" else f"its console showed {tail}"
        return Verdict(
            False, f"a test guest did not boot under accel={accel} within {timeout:g} s; {shown}"
        )
    except TargetError as exc:
        return Verdict(False, f"QEMU could not start a guest under accel={accel}: {_short(exc)}")
    finally:
        guest.stop()


def _short(exc: TargetError) -> str:
    # QEMU's first complaint is the informative one ("error: failed to set MSR 0x10a ..."),
    # not the QMP connection that broke because of it.
    if isinstance(exc, QemuStartError) and exc.qemu_said != "(empty)":
        return exc.qemu_said.split(" | ")[0][:160]
    return str(exc)[:160]


def kvm_verdict(*, refresh: bool = False) -> Verdict:
    """Does KVM really run a guest on this host? Cached per QEMU, kernel, /dev/kvm and boot."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Verdict(False, "/dev/kvm is missing or not accessible")
    qemu = shutil.which(QEMU)
    if qemu is None:
        return Verdict(False, f"{QEMU} not found (install qemu-system-x86)")
    try:
        kernel, _ = find_kernel()
    except VmtaxError as exc:
        return Verdict(False, exc.message)
    path = _verdict_file(verdict_key(Path(qemu), kernel))
    if not refresh and path.is_file():
        try:
            return Verdict(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
    verdict = test_guest_boots("kvm", KVM_TEST_TIMEOUT)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(verdict)))
    return verdict


def choose_accel(requested: str = "auto", *, notice: bool = True) -> str:
    """``auto`` -> ``kvm`` if a test guest boots under KVM, else ``tcg`` with a one-line
    notice on stderr. ``kvm`` when KVM does not work is an error; ``tcg`` is always allowed."""
    if requested not in ("auto", "kvm", "tcg"):
        raise UsageError(f"unknown accelerator {requested!r} (choose auto, kvm or tcg)")
    if requested == "tcg":
        return "tcg"
    verdict = kvm_verdict()
    if verdict.kvm_ok:
        return "kvm"
    if requested == "kvm":
        raise VmtaxError(f"accel=kvm refused: {one_line(verdict.reason)}")
    if notice:
        print(
            f"vmtax: KVM refused: {one_line(verdict.reason)}; using accel=tcg (emulation)",
            file=sys.stderr,
        )
    return "tcg"


def one_line(text: str, limit: int = 240) -> str:
    """A guest console's text fit for one message line: escape sequences and control
    characters (a BIOS clears the screen with them) removed, whitespace collapsed, shortened."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|[\x00-\x1f\x7f]", " ", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

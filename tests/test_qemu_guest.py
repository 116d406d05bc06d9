"""Real QEMU (TCG) guests booted from the minimal image, with the agent as PID 1.

Nothing is mocked: the kernel is Debian's linux-image-amd64, the initramfs holds
busybox-static and the real static agent, and the stream comes back over a virtio-serial
port (serve) or the serial console (one-shot).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from vmtax.contract import read_stream
from vmtax.errors import VmtaxError
from vmtax.targets import cpio
from vmtax.targets import qemu as qemu_module
from vmtax.targets.base import AgentTimeout, TargetError, find_agent
from vmtax.targets.images import (
    ImageContents,
    _has_pvh_note,
    build_minimal,
    find_kernel,
    is_static,
    pvh_kernel,
)
from vmtax.targets.qemu import (
    GuestSpec,
    QemuGuest,
    QemuTarget,
    _frame,
    kernel_hang,
    run_oneshot,
)

pytestmark = pytest.mark.slow

SMALL = GuestSpec(vcpus=2, memory_mb=512, accel="tcg")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VMTAX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield build_minimal(find_agent())


def test_agent_is_pid1_and_its_one_shot_stream_comes_back_whole(image):
    # Kernel words after `--` reach /init, which execs the agent as PID 1 with them.
    spec = GuestSpec(vcpus=1, memory_mb=512, accel="tcg", scratch_mb=0)
    lines, console = run_oneshot(
        image, spec, ["run", "cpuid", "--runs", "2", "--iterations", "2000"], timeout=120
    )
    stream = read_stream(lines)
    assert stream.complete, stream.problem
    assert [r.summary.run for r in stream.runs] == [0, 1]
    assert all(len(r.values) == r.summary.n for r in stream.runs)
    assert stream.header is not None and "TCG" in (stream.header.env.hypervisor.vendor or "")
    # As PID 1 the agent powers the guest off; an init that merely exited would panic.
    assert "Kernel panic" not in console and "Power down" in console


def test_serve_target_streams_runs_pins_vcpus_and_survives_a_hung_run(image):
    target = QemuTarget("L1", SMALL, image=image, boot_timeout=150)
    try:
        lines = list(target.run_agent(["run", "cpuid", "--runs", "2"], timeout=60))
        stream = read_stream(lines)
        assert stream.complete and len(stream.runs) == 2, stream.problem
        prov = target.provenance()
        assert sorted(prov["vcpu_pinning"]) == ["0", "1"]
        assert prov["image_hash"] == image.digest and prov["boot_seconds"] > 0
        assert target.labels()["accel"] == "tcg"
        first_guest = target.guest
        assert first_guest is not None
        workdir = first_guest.workdir

        # A request the agent refuses ends with its error line, and the same guest serves
        # on. (Its frame once went unrecognised and the request waited for its timeout.)
        assert list(target.run_agent(["run", "cpuid", "--iterations", "1"], timeout=60)) == []
        assert "invalid --iterations 1" in target.last_stderr
        assert target.guest is first_guest

        # A run that outlives its timeout: the guest is killed, completed runs are whole.
        got: list[str] = []
        with pytest.raises(AgentTimeout, match="guest killed"):
            for line in target.run_agent(
                ["run", "cpu", "--runs", "200", "--duration", "0.3"], timeout=8
            ):
                got.append(line)
        partial = read_stream(got)
        assert partial.runs, "no completed run arrived before the timeout"
        assert all(len(r.values) == r.summary.n for r in partial.runs)
        assert partial.end is None
        assert not first_guest.running() and workdir is not None and not workdir.exists()

        # The next run boots a fresh guest.
        again = read_stream(target.run_agent(["run", "syscall", "--runs", "1"], timeout=60))
        assert again.complete and target.guest is not first_guest
    finally:
        target.close()
    assert target.guest is None


def test_a_done_frame_is_recognised_whatever_the_order_of_its_keys():
    tail = "vmtax-probe: error: " + "x" * 300 + "\n"
    for keys in (("type", "exit_code", "stderr_tail"), ("exit_code", "stderr_tail", "type")):
        values = {"type": "serve_done", "exit_code": 2, "stderr_tail": tail}
        line = json.dumps({k: values[k] for k in keys}, separators=(",", ":"))
        assert _frame(line) == values
    sample = json.dumps({"type": "samples", "run": 0, "values": [1.0] * 50})
    assert _frame(sample) is None
    assert _frame('{"type":"header","params":{"cmd":"serve_x"}}') is None


def test_image_is_cached_by_content_hash(image, tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(image.directory.parent.parent))
    assert build_minimal(find_agent()).directory == image.directory
    other = tmp_path / "vmtax-probe"
    shutil.copyfile(find_agent(), other)
    with other.open("ab") as fh:
        fh.write(b"\0")  # same program, different bytes: a different image
    other.chmod(0o755)
    changed = build_minimal(other)
    assert changed.digest != image.digest and changed.initrd.is_file()
    shutil.rmtree(changed.directory)


def test_the_image_carries_the_kernel_unpacked_at_its_pvh_entry_once(image, tmp_path):
    # The real kernel of this machine (linux-image-amd64, as every guest boots it).
    kernel, _ = find_kernel()
    elf = image.boot_kernel.read_bytes()
    assert image.boot_kernel.name == "vmlinux" and _has_pvh_note(elf)
    assert image.manifest["boot_kernel"] == "vmlinux (PVH entry)"
    # What QEMU boots is what the compressed kernel holds, byte for byte.
    assert pvh_kernel(kernel.read_bytes()) == elf
    # The note is what decides: with its type changed, the same ELF is not bootable by PVH.
    at = elf.find(b"Xen\x00", elf.find(b"\x12\x00\x00\x00Xen\x00") - 4)
    broken = bytearray(elf)
    broken[at - 4 : at] = (99).to_bytes(4, "little")
    assert at > 0 and not _has_pvh_note(bytes(broken))
    assert pvh_kernel(b"MZ not a kernel") is None
    # A second image of the same kernel links the same file instead of unpacking it again.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VMTAX_CACHE_DIR", str(image.directory.parent.parent))
        other = build_minimal(find_agent(), contents=ImageContents(files=(("etc/x", b"x"),)))
    assert other.digest != image.digest
    assert other.boot_kernel.stat().st_ino == image.boot_kernel.stat().st_ino
    # Without a NIC, /init loads no NIC driver: it is listed apart.
    subprocess.run(
        ["cpio", "-i", "-d", "-F", str(image.initrd), "etc/vmtax-modules", "etc/vmtax-net-modules"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    first = (tmp_path / "etc" / "vmtax-modules").read_text().split()
    later = (tmp_path / "etc" / "vmtax-net-modules").read_text().split()
    assert "virtio_net.ko" in later and "virtio_net.ko" not in first
    assert "ext4.ko" in first and "virtio_console.ko" in first
    assert sorted(first + later) == sorted(image.manifest["modules"])


def test_a_dynamically_linked_agent_is_refused():
    assert not is_static(Path("/bin/ls"))
    with pytest.raises(VmtaxError, match="dynamically linked"):
        build_minimal(Path("/bin/ls"))


@pytest.mark.skipif(not shutil.which("cpio"), reason="cpio is not installed")
def test_cpio_archive_is_readable_by_gnu_cpio(tmp_path):
    archive = tmp_path / "a.cpio"
    with archive.open("wb") as fh:
        cpio.write_newc(
            fh,
            [cpio.directory("etc"), cpio.regular("etc/x", b"hello\n"), cpio.symlink("etc/y", "x")],
        )
    listing = subprocess.run(
        ["cpio", "-t", "-F", str(archive)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listing == ["etc", "etc/x", "etc/y"]
    subprocess.run(
        ["cpio", "-i", "-d", "-F", str(archive)], cwd=tmp_path, check=True, capture_output=True
    )
    assert (tmp_path / "etc" / "x").read_text() == "hello\n"
    assert os.readlink(tmp_path / "etc" / "y") == "x"


#: What L1's kernel printed in a CI run whose L2 boot (under L1's KVM on emulated SVM) hung:
#: the console's last lines, as the boot-timeout error quoted them.
HUNG_L1_CONSOLE = (
    "[  817.533510] watchdog: BUG: soft lockup - CPU#1 stuck for 730s! [qemu-system-x86:145]\n"
    "[  845.533450] watchdog: BUG: soft lockup - CPU#1 stuck for 756s! [qemu-system-x86:145]\n"
    "[  873.533533] watchdog: BUG: soft lockup - CPU#1 stuck for 782s! [qemu-system-x86:145]\n"
)


def test_a_kernel_hang_is_read_from_the_watchdogs_lines():
    assert kernel_hang(HUNG_L1_CONSOLE) == "CPU#1 stuck for 782 s in qemu-system-x86:145"
    # A CPU stuck briefly (a starved vCPU thread) is not a hang yet.
    brief = "[   40.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [swapper/0:1]\n"
    assert kernel_hang(brief) is None and kernel_hang("") is None
    assert kernel_hang(brief + HUNG_L1_CONSOLE.splitlines()[0]).startswith("CPU#1 stuck for 730")


def _console_hangs(monkeypatch, boots: int) -> list[QemuGuest]:
    """The first ``boots`` guests hang as the hung L1 did: their consoles end with its lines
    and their agent never says it is ready (a hung kernel runs no agent; without that, a
    guest that boots within one readiness wait on a quiet machine was never looked at).
    Only the console and the readiness are doctored: the emulated-SVM hang they stand for
    cannot be provoked on demand, while the guests, their boot and their teardown are real."""
    seen: list[QemuGuest] = []
    real_start, real_console = QemuGuest.start, QemuGuest.console_text
    real_ready = qemu_module.AgentChannel.wait_ready

    def start(guest: QemuGuest) -> None:
        seen.append(guest)
        real_start(guest)

    def hung(guest: QemuGuest) -> bool:
        return guest in seen and seen.index(guest) < boots

    def console_text(guest: QemuGuest) -> str:
        return real_console(guest) + (HUNG_L1_CONSOLE if hung(guest) else "")

    def wait_ready(channel: qemu_module.AgentChannel, deadline: float) -> bool:
        if any(g.channel is channel and hung(g) for g in seen):
            time.sleep(max(0.0, min(deadline - time.monotonic(), 0.2)))
            return False
        return real_ready(channel, deadline)

    monkeypatch.setattr(QemuGuest, "start", start)
    monkeypatch.setattr(QemuGuest, "console_text", console_text)
    monkeypatch.setattr(qemu_module.AgentChannel, "wait_ready", wait_ready)
    return seen


def test_a_boot_whose_kernel_hangs_is_booted_once_more_and_said(image, monkeypatch):
    guests = _console_hangs(monkeypatch, boots=1)
    target = QemuTarget("L1", SMALL, image=image, boot_timeout=150)
    try:
        stream = read_stream(target.run_agent(["run", "syscall", "--runs", "1"], timeout=60))
        assert stream.complete, stream.problem
        assert len(guests) == 2 and not guests[0].running() and guests[0].workdir is None
        hangs = target.provenance()["boot_hangs"]
        assert hangs == ["boot 1: CPU#1 stuck for 782 s in qemu-system-x86:145"]
    finally:
        target.close()


def test_a_nested_stack_whose_next_level_stalls_is_booted_once_more_and_the_last_boot_waits(
    image, monkeypatch
):
    # A host-side port that no agent serves in this image stands for the level that never
    # comes up (the stall itself, L2 stuck under L1's KVM, cannot be provoked on demand);
    # with a stall limit of 0.15 s the first boot is a stall, the last boot has no limit.
    monkeypatch.setattr(qemu_module, "STALL_SHARE", 0.001)
    spec = replace(SMALL, host_ports=("vmtax-host",))
    target = QemuTarget("L1", spec, image=image, boot_timeout=150)
    try:
        target.prepare()
        assert target.guest is not None and target.guest.running()
        assert target.provenance()["boot_hangs"] == [
            "boot 1: no level came up for 0 s (up after: none)"
        ]
    finally:
        target.close()


def test_a_guest_that_hangs_at_every_boot_is_one_error_line(image, monkeypatch):
    guests = _console_hangs(monkeypatch, boots=99)
    target = QemuTarget("L1", SMALL, image=image, boot_timeout=150)
    with pytest.raises(TargetError) as info:
        try:
            target.prepare()
        finally:
            target.close()  # a guest that did boot is never left behind
    message = str(info.value)
    assert message.startswith("qemu-L1: the guest kernel hung at each of 2 boots (boot 1: CPU#1")
    assert "\n" not in message and "stuck for 782s" in message
    assert len(guests) == 2 and not any(g.running() for g in guests) and target.guest is None


def test_a_host_name_resolves_inside_the_busybox_guest(image):
    # The agent connects to "localhost" (its resolver reads the image's /etc/hosts) and
    # GETs that very file from busybox's httpd, started by the agent inside the guest.
    assert b"localhost" in cpio_member(image, "etc/hosts")
    target = QemuTarget("L1", replace(SMALL, vcpus=1), image=image, boot_timeout=150)
    try:
        # 20 requests, however slow: under TCG beside a CPU load one took 57 ms, and the
        # default time bound (1 s) stopped the run at 18.
        args = ["run", "http", "--runs", "1", "--iterations", "20", "--duration", "60"]
        args += ["--param", "host=localhost", "--param", "port=8089", "--param", "path=/hosts"]
        args += ["--param", "server=/bin/busybox httpd -f -p 127.0.0.1:8089 -h /etc"]
        stream = read_stream(target.run_agent(args, timeout=90))
        assert stream.complete, (stream.problem, target.last_stderr)
        assert stream.runs[0].summary.n == 20
    finally:
        target.close()


def cpio_member(image, name: str) -> bytes:
    out = subprocess.run(
        ["cpio", "-i", "--to-stdout", name], input=image.initrd.read_bytes(),
        capture_output=True, check=True,
    )  # fmt: skip
    return out.stdout

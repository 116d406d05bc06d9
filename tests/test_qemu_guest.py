"""Real QEMU (TCG) guests booted from the minimal image, with the agent as PID 1.

Nothing is mocked: the kernel is Debian's linux-image-amd64, the initramfs holds
busybox-static and the real static agent, and the stream comes back over a virtio-serial
port (serve) or the serial console (one-shot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vmtax.contract import read_stream
from vmtax.errors import VmtaxError
from vmtax.targets import cpio
from vmtax.targets.base import AgentTimeout, find_agent
from vmtax.targets.images import build_minimal, is_static
from vmtax.targets.qemu import GuestSpec, QemuTarget, run_oneshot

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

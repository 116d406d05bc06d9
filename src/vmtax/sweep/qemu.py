"""QEMU guests of a sweep (level L1), booted from the minimal image with the agent."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from vmtax.doctor.leftovers import RAM_PREFIX, RAM_ROOT, write_owner
from vmtax.sweep.cgroup import swap_total_kb
from vmtax.sweep.run import Guest
from vmtax.sweep.spec import StepSize, SweepSpec
from vmtax.targets.base import find_agent
from vmtax.targets.images import AGENT_ONLY, Image, build_minimal
from vmtax.targets.qemu import GuestSpec, QemuTarget


class QemuGuests:
    """Boots each guest from the minimal image and waits for its agent. vCPUs are not
    pinned: with more vCPUs than CPUs the host scheduler shares the CPUs, which is what a
    sweep measures.

    Under a memory cap on a machine without swap, guest RAM is a shared file
    (``memory-backend-file,share=on``) in a temporary directory on disk, so reclaim inside
    the cap can write guest pages out and fault them back (anonymous RAM could not be paged
    at all). ``close()`` removes the directory."""

    def __init__(
        self, spec: SweepSpec, *, boot_timeout: float = 300.0, image: Image | None = None
    ) -> None:
        self.spec = spec
        self.boot_timeout = boot_timeout
        # The probe workloads are the agent's own: small guests need none of the servers.
        self.image = image or build_minimal(find_agent(), contents=AGENT_ONLY)
        self.file_backed = bool(spec.cap_mb) and swap_total_kb() == 0
        self.ram_dir: Path | None = None
        self._made = 0

    def __call__(self, size: StepSize, index: int, vcpus: int, memory_mb: int) -> Guest:
        return self.boot(size, index, vcpus, memory_mb)

    def boot(
        self,
        size: StepSize,
        index: int,
        vcpus: int,
        memory_mb: int,
        *,
        network: str = "",
        scratch_mb: int = 0,
        provenance: dict[str, Any] | None = None,
    ) -> Guest:
        """Boot guest ``index`` of the step; ``network="user"`` gives it a NIC whose
        FORWARDED_PORTS this machine reaches on its loopback, ``scratch_mb`` a disk at /tmp."""
        # Named vCPU threads ("CPU n/TCG"), so their run-queue wait can be told apart from
        # QEMU's other threads (QEMU merges this -name with its own).
        extra: tuple[str, ...] = ("-name", "debug-threads=on")
        if self.file_backed:
            if self.ram_dir is None:
                self.ram_dir = Path(tempfile.mkdtemp(prefix=RAM_PREFIX, dir=RAM_ROOT))
                write_owner(self.ram_dir)  # so that `vmtax doctor` can tell a leftover
            self._made += 1
            ram = self.ram_dir / f"guest{self._made}.ram"
            extra += (
                "-object",
                f"memory-backend-file,id=vmtax-ram,size={memory_mb}M,mem-path={ram},share=on",
                "-machine",
                "memory-backend=vmtax-ram",
            )
        gspec = GuestSpec(vcpus=vcpus, memory_mb=memory_mb, accel=self.spec.accel, pin=False,
                          scratch_mb=scratch_mb, extra_args=extra, network=network)  # fmt: skip
        target = QemuTarget(
            "L1",
            gspec,
            image=self.image,
            boot_timeout=self.boot_timeout,
            labels={"sweep_step": str(size.index), "guest": str(index + 1)},
            provenance=provenance,
        )
        target.name = f"qemu-guest{index + 1}"
        target.prepare()
        assert target.guest is not None and target.guest.qemu_pid is not None
        return Guest(target, vcpus, memory_mb, pid=target.guest.qemu_pid)

    def close(self) -> None:
        if self.ram_dir is not None:
            shutil.rmtree(self.ram_dir, ignore_errors=True)
            self.ram_dir = None

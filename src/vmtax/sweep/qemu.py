"""QEMU guests of a sweep (level L1), booted from the minimal image with the agent."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vmtax.doctor.leftovers import RAM_PREFIX, RAM_ROOT, write_owner
from vmtax.plan.targets import make_targets
from vmtax.sweep.cgroup import swap_total_kb
from vmtax.sweep.run import Guest
from vmtax.sweep.spec import StepSize, SweepSpec
from vmtax.targets.base import Target, find_agent, vm_pid
from vmtax.targets.images import AGENT_ONLY, Image, build_minimal
from vmtax.targets.spec import SizedGuestSpec


class QemuGuests:
    """Boots each guest from the minimal image and waits for its agent, a target made by
    the targets' one factory from the guest's typed spec (``SizedGuestSpec``).

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
        #: Every guest booted, for ``cancel`` (a stopped guest's cancel does nothing).
        self._booted: list[Target] = []

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
        ram_file: str | None = None
        if self.file_backed:
            if self.ram_dir is None:
                self.ram_dir = Path(tempfile.mkdtemp(prefix=RAM_PREFIX, dir=RAM_ROOT))
                write_owner(self.ram_dir)  # so that `vmtax doctor` can tell a leftover
            self._made += 1
            ram_file = str(self.ram_dir / f"guest{self._made}.ram")
        spec = SizedGuestSpec(
            name=f"qemu-guest{index + 1}",
            vcpus=vcpus,
            memory_mb=memory_mb,
            accel=self.spec.accel,
            network=network,
            scratch_mb=scratch_mb,
            ram_file=ram_file,
            labels={"sweep_step": str(size.index), "guest": str(index + 1)},
            provenance=provenance or {},
        )
        (target,), _ = make_targets([spec], image=self.image, boot_timeout=self.boot_timeout)
        self._booted.append(target)
        target.prepare()
        pid = vm_pid(target)
        assert pid is not None, f"{target.name} booted without a QEMU pid"
        return Guest(target, vcpus, memory_mb, pid=pid)

    def cancel(self) -> None:
        """Ctrl-C, from another thread: kill every guest, one still booting too (its boot
        then fails at once instead of waiting for its agent)."""
        for target in list(self._booted):
            with contextlib.suppress(Exception):
                target.cancel()

    def close(self) -> None:
        self._booted.clear()
        if self.ram_dir is not None:
            shutil.rmtree(self.ram_dir, ignore_errors=True)
            self.ram_dir = None

"""Where a sweep's guests come from: QEMU guests booted from the minimal image (level L1),
or agent processes on this machine (level L0: the same sweep without a hypervisor, as a
reference and for quick checks)."""

from __future__ import annotations

from pathlib import Path

from vmtax.sweep.run import Guest, GuestFactory
from vmtax.sweep.spec import StepSize, SweepSpec


def qemu_factory(spec: SweepSpec, *, boot_timeout: float = 300.0) -> GuestFactory:
    """Boot each guest from the minimal image and wait for its agent. vCPUs are not pinned:
    with more vCPUs than CPUs the host scheduler shares the CPUs, which is what is measured."""
    from vmtax.targets.base import find_agent
    from vmtax.targets.images import build_minimal
    from vmtax.targets.qemu import GuestSpec, QemuTarget

    image = build_minimal(find_agent())

    def make(size: StepSize, index: int, vcpus: int, memory_mb: int) -> Guest:
        gspec = GuestSpec(vcpus=vcpus, memory_mb=memory_mb, accel=spec.accel, pin=False,
                          scratch_mb=0)  # fmt: skip
        target = QemuTarget(
            "L1",
            gspec,
            image=image,
            boot_timeout=boot_timeout,
            labels={"sweep_step": str(size.index), "guest": str(index + 1)},
        )
        target.name = f"qemu-guest{index + 1}"
        target.prepare()
        assert target.guest is not None and target.guest.proc is not None
        return Guest(target, vcpus, memory_mb, pid=target.guest.proc.pid)

    return make


def local_factory(spec: SweepSpec, agent: str | Path | None = None) -> GuestFactory:
    """Agent processes on this machine, client i placed on CPU i mod the CPU count."""
    from vmtax.targets.local import LocalTarget

    def make(size: StepSize, index: int, vcpus: int, memory_mb: int) -> Guest:
        del size
        target = LocalTarget(agent, level="L0", name=f"local-{index + 1}")
        target.prepare()
        return Guest(target, vcpus, memory_mb, cpus=str(index % spec.host_cpus))

    return make

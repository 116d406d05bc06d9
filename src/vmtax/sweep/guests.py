"""Where a sweep's guests come from: QEMU guests booted from the minimal image (level L1,
``qemu``; the triplet's in ``triplet``), or agent processes on this machine (level L0: the
same sweep without a hypervisor, as a reference and for quick checks). Either way the
targets are made from typed specs by the factory a run's plan uses too
(``vmtax.plan.targets.make_targets``)."""

from __future__ import annotations

from vmtax.plan.targets import make_targets
from vmtax.sweep.qemu import QemuGuests
from vmtax.sweep.run import Guest
from vmtax.sweep.spec import StepSize, SweepSpec
from vmtax.sweep.triplet import TripletGuests
from vmtax.targets.spec import LocalSpec

__all__ = ["LocalGuests", "QemuGuests", "local_factory", "qemu_factory"]


def qemu_factory(spec: SweepSpec, *, boot_timeout: float = 300.0) -> QemuGuests:
    """The guests of a QEMU sweep: the triplet's tiers, or one guest per client."""
    if spec.workload == "triplet":
        return TripletGuests(spec, boot_timeout=boot_timeout)
    return QemuGuests(spec, boot_timeout=boot_timeout)


def local_factory(spec: SweepSpec) -> LocalGuests:
    return LocalGuests(spec)


class LocalGuests:
    """Agent processes on this machine: a one-thread client i on CPU i mod the CPU count, a
    multi-threaded one (the vcpus axis) on all CPUs."""

    def __init__(self, spec: SweepSpec) -> None:
        self.spec = spec

    def __call__(self, size: StepSize, index: int, vcpus: int, memory_mb: int) -> Guest:
        del size
        (target,), _ = make_targets([LocalSpec(level="L0", name=f"local-{index + 1}")])
        target.prepare()
        # One thread: its own CPU, round-robin; several (threads workload): all CPUs.
        n = self.spec.host_cpus
        cpus = str(index % n) if vcpus == 1 else ",".join(str(c) for c in range(n))
        return Guest(target, vcpus, memory_mb, cpus=cpus)

    def close(self) -> None:
        """Nothing to remove: each agent process ends with its request."""

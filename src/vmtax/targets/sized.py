"""An L1 guest booted at the size its spec gives (``SizedGuestSpec``): a sweep's guests,
each sized by its step, as opposed to a level, sized by a preset (``levels``)."""

from __future__ import annotations

from vmtax.targets.images import AGENT_ONLY, Image, ImageContents
from vmtax.targets.qemu import DEFAULT_BOOT_TIMEOUT, GuestSpec, QemuTarget
from vmtax.targets.spec import SizedGuestSpec


def sized_guest(
    spec: SizedGuestSpec,
    *,
    image: Image | None = None,
    contents: ImageContents = AGENT_ONLY,
    boot_timeout: float | None = None,
) -> QemuTarget:
    """The guest's target, not booted yet. Its vCPUs are not pinned: with more vCPUs than
    CPUs the host scheduler shares the CPUs, which is what a sweep measures."""
    # Named vCPU threads ("CPU n/TCG"), so their run-queue wait can be told apart from
    # QEMU's other threads (QEMU merges this -name with its own).
    extra: tuple[str, ...] = ("-name", "debug-threads=on")
    if spec.ram_file:
        extra += (
            "-object",
            f"memory-backend-file,id=vmtax-ram,size={spec.memory_mb}M,mem-path={spec.ram_file},"
            "share=on",
            "-machine",
            "memory-backend=vmtax-ram",
        )
    guest = GuestSpec(
        vcpus=spec.vcpus,
        memory_mb=spec.memory_mb,
        accel=spec.accel,
        pin=False,
        scratch_mb=spec.scratch_mb,
        extra_args=extra,
        network=spec.network,
        pvh=False,  # the compressed kernel: QEMU's own memory counts under a memory cap
    )
    target = QemuTarget(
        "L1",
        guest,
        image=image,
        contents=contents,
        boot_timeout=DEFAULT_BOOT_TIMEOUT if boot_timeout is None else boot_timeout,
        labels=spec.labels,
        provenance=spec.provenance,
    )
    target.name = spec.name
    return target

"""Levels L0..L3 as targets, sized by the studies' presets.

- ``seed-c`` (study C): the innermost guest gets a base size and each level further out
  adds 2 CPUs and a fixed memory step for its hypervisor, scaled down to fit the machine.
- ``seed-a-overcommitted`` (study A): every level gets all CPUs and all memory.
- ``seed-a-reserved`` (study A): each hypervisor keeps one CPU and a memory step free, so
  L1 gets N-1 CPUs, L2 N-2, ... (never fewer than one).

On a small machine the steps shrink; what was chosen is recorded in each target's
provenance (``sizing``) so a result always says how its guest was built.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any

from vmtax.doctor import require
from vmtax.errors import UsageError, VmtaxError
from vmtax.targets.accel import choose_accel
from vmtax.targets.base import Capabilities, Target
from vmtax.targets.images import AGENT_ONLY, ImageContents
from vmtax.targets.local import LocalTarget
from vmtax.targets.qemu import GuestSpec, QemuTarget
from vmtax.targets.servers import HostEnd, Listener, PlacedServer, ServerSpec

PRESETS = ("seed-c", "seed-a-overcommitted", "seed-a-reserved")
LEVELS = ("L0", "L1", "L2", "L3")
#: Study C adds 2 cores per hypervisor; study A leaves 2 GB of 16 (1/8) per hypervisor.
SEED_C_CPU_STEP = 2
MEMORY_STEP_FRACTION = 8
MIN_GUEST_MB = 512
DEFAULT_TIMEOUT = 180.0


@dataclass(frozen=True)
class Sizing:
    level: str
    vcpus: int
    memory_mb: int
    preset: str
    host_cpus: int
    host_memory_mb: int
    cpu_step: int
    memory_step_mb: int


def host_resources() -> tuple[int, int]:
    """(usable CPUs, memory in MiB) of this machine."""
    cpus = len(os.sched_getaffinity(0))
    mem_kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
                break
    return cpus, mem_kb // 1024


def _round(mb: int) -> int:
    return max(MIN_GUEST_MB, mb // 256 * 256)


#: Without an explicit machine size, guests share a safe budget, not the whole machine: at
#: most this fraction of MemAvailable and at most GUEST_MEMORY_CAP_MB (a probe needs little
#: memory; a guest as big as the host pushes the host into swap).
GUEST_MEMORY_FRACTION = 0.25
GUEST_MEMORY_CAP_MB = 4096


def size_levels(
    levels: list[str], preset: str, *, cpus: int | None = None, memory_mb: int | None = None
) -> dict[str, Sizing]:
    """vCPUs and memory for each guest level (L1..) under ``preset``.

    ``memory_mb`` is the memory the preset divides (study A's 16 GB, say); by default it is
    the guest budget, min(GUEST_MEMORY_FRACTION x MemAvailable, GUEST_MEMORY_CAP_MB), and
    the Sizing records it as ``host_memory_mb``.
    """
    if preset in KVM_TESTBED_PRESETS:
        raise UsageError(
            f"sizing preset {preset!r} sizes the nested-KVM testbed: add --inner-accel kvm"
        )
    if preset not in PRESETS:
        raise UsageError(f"unknown sizing preset {preset!r} (choose {', '.join(PRESETS)})")
    host_cpus, _total_mb = host_resources()
    cpus = cpus or host_cpus
    if not memory_mb:
        available_mb = _total_mb
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available_mb = int(line.split()[1]) // 1024
                    break
        memory_mb = min(int(available_mb * GUEST_MEMORY_FRACTION), GUEST_MEMORY_CAP_MB)
    depth = max(int(lv[1]) for lv in levels)
    mem_step = _round(memory_mb // MEMORY_STEP_FRACTION)
    out: dict[str, Sizing] = {}
    for lv in levels:
        n = int(lv[1])
        if n == 0:
            continue
        if preset == "seed-a-overcommitted":
            cpu_step, step_mb, vcpus, mem = 0, 0, cpus, memory_mb
        elif preset == "seed-a-reserved":
            cpu_step, step_mb = 1, mem_step
            vcpus, mem = max(1, cpus - n), _round(memory_mb - n * mem_step)
        else:
            # Level n sits under depth-n more hypervisors; each one takes its step from the
            # machine. The CPU step shrinks (2, then 1, then 0) until the innermost has one.
            # The guest keeps at least two vCPUs where the host has two, since the IPI and
            # wake-up probes need a second CPU.
            floor = min(2, cpus)
            cpu_step = min(SEED_C_CPU_STEP, max(0, (cpus - floor) // depth))
            step_mb = mem_step
            vcpus = max(floor, cpus - cpu_step * n)
            mem = _round(memory_mb - n * mem_step)
        out[lv] = Sizing(lv, vcpus, mem, preset, cpus, memory_mb, cpu_step, step_mb)
    return out


def _check_levels(levels: list[str], sets: list[str | None]) -> None:
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"unknown level {bad[0]!r} (choose from {', '.join(LEVELS)})")
    if len(set(zip(levels, sets, strict=True))) != len(levels):
        raise UsageError("a level is listed twice without a set to tell the two apart")


#: The nested-KVM testbed's presets (``--inner-accel kvm``): fixed sizes by level, (vCPUs,
#: MiB). L1 runs under TCG with two vCPUs and room for L2 (whose image carries L3).
#: ``kvm-testbed`` gives L2 and L3 one vCPU each, as the testbed was tried by hand (nested
#: SVM with one vCPU); ``kvm-testbed-smp`` gives L2 two, for what needs a second CPU (the
#: wakeup probe's IPI to an idle vCPU: on one CPU its two threads share it, and no IPI is sent).
KVM_TESTBED_PRESETS = {
    "kvm-testbed": {"L1": (2, 4096), "L2": (1, 2048), "L3": (1, 1024)},
    "kvm-testbed-smp": {"L1": (2, 4096), "L2": (2, 2048), "L3": (1, 1024)},
}
KVM_TESTBED_PRESET = "kvm-testbed"
KVM_TESTBED_SIZES = KVM_TESTBED_PRESETS[KVM_TESTBED_PRESET]
INNER_ACCELS = ("tcg", "kvm")


def kvm_testbed_sizing(levels: list[str], preset: str = KVM_TESTBED_PRESET) -> dict[str, Sizing]:
    """The fixed sizes of the nested-KVM testbed for L1..the deepest of ``levels``.
    ``preset`` is one of ``KVM_TESTBED_PRESETS``; ``seed-c``, the default of ``--preset``
    for TCG levels, means ``kvm-testbed``."""
    if preset == "seed-c":
        preset = KVM_TESTBED_PRESET
    if preset not in KVM_TESTBED_PRESETS:
        raise UsageError(
            f"sizing preset {preset!r} is for TCG levels; with --inner-accel kvm choose "
            f"{' or '.join(KVM_TESTBED_PRESETS)}"
        )
    host_cpus, host_mb = host_resources()
    depth = max(int(lv[1]) for lv in levels)
    out = {}
    for n in range(1, depth + 1):
        vcpus, mem = KVM_TESTBED_PRESETS[preset][f"L{n}"]
        out[f"L{n}"] = Sizing(f"L{n}", vcpus, mem, preset, host_cpus, host_mb, 0, 0)
    return out


def kvm_on(level: int, l1_accel: str) -> str:
    """What the KVM that runs level ``level`` (2 or deeper) itself runs on: the label
    ``kvm_on``. L2's KVM (in L1) uses SVM as TCG emulates it, or the host's nested KVM; L3's
    KVM (in L2) uses the SVM that L1's KVM emulates for L2 (nested SVM)."""
    if level == 2:
        return "tcg-svm" if l1_accel == "tcg" else "kvm-nested"
    return "kvm-nested-svm"


def nested_kvm_blocker() -> str:
    """Why KVM cannot run inside our guests on this host (vmtax nests with TCG inside)."""
    with open("/proc/cpuinfo") as fh:
        flags = fh.read()
    if " vmx" not in flags and " svm" not in flags:
        return "the host CPU shows no vmx/svm flag, so a guest cannot run KVM itself"
    for mod in ("kvm_intel", "kvm_amd"):
        try:
            with open(f"/sys/module/{mod}/parameters/nested") as fh:
                if fh.read().strip() in ("Y", "1"):
                    break
        except OSError:
            continue
    else:
        return "kvm nested=1 is not set (modprobe kvm_intel nested=1 or kvm_amd nested=1)"
    return ""


def level_targets(
    levels: list[str],
    *,
    preset: str = "seed-c",
    accel: str = "auto",
    image: str = "minimal",
    timeout: float = DEFAULT_TIMEOUT,
    inner_accel: str = "tcg",
    guest_net: str = "",
    contents: ImageContents = AGENT_ONLY,
    sets: list[str | None] | None = None,
) -> list[Target]:
    """One target per level: L0 is this machine, L1..L3 are QEMU guests vmtax boots, whose
    images carry ``contents`` besides the agent (the workloads' servers, when a run may use
    them).

    ``sets[i]`` (``a``, ``b``, ...) makes level i one of several configurations of the same
    guest (``--levels L1,L1``): labelled ``set=<set>``, named ``qemu-L1-<set>``, booted apart.

    ``accel=auto`` boots a test guest under KVM first and falls back to TCG with a notice.
    ``timeout`` bounds each guest's boot (to the agent's ready line).
    ``inner_accel="kvm"`` boots L2 and L3 under the KVM of the level above them (the
    nested-KVM testbed, fixed sizes ``KVM_TESTBED_SIZES``); ``"tcg"`` nests TCG in TCG.
    ``guest_net="user"`` gives L1 guests a NIC on QEMU's user network (this machine is
    10.0.2.2 there), for workloads whose peer is on this machine.
    """
    sets = list(sets) if sets is not None else [None] * len(levels)
    _check_levels(levels, sets)
    if image not in ("minimal", "full"):
        raise UsageError(f"unknown image mode {image!r} (choose minimal or full)")
    if inner_accel not in INNER_ACCELS:
        raise UsageError(f"unknown inner accelerator {inner_accel!r} (choose tcg or kvm)")
    guests = [lv for lv in levels if lv != "L0"]
    depth = max((int(lv[1]) for lv in guests), default=0)
    if guest_net not in ("", "user"):
        raise UsageError(f"unknown guest network {guest_net!r} (choose user)")
    if guest_net and depth > 1:
        raise UsageError("--guest-net reaches L1 guests only; L2 and L3 have no NIC")
    # Size every level down to the deepest, so that an L2 guest sits in an L1 of L1's size.
    sizing: dict[str, Sizing] = {}
    if guests:
        deepest = [f"L{n}" for n in range(1, depth + 1)]
        if inner_accel == "kvm":
            sizing = kvm_testbed_sizing(deepest, preset)
        else:
            sizing = size_levels(deepest, preset)
    chosen = "tcg"
    if guests:
        # Every package the levels lack, in one line, before anything is built or booted.
        require("levels", "testbed" if inner_accel == "kvm" else "levels", what="--levels")

        chosen = choose_accel(accel)
        if depth > 1 and chosen == "kvm":
            blocker = nested_kvm_blocker()
            if not blocker and inner_accel == "tcg":
                blocker = "TCG inside a KVM guest is not supported"
            if blocker:
                raise VmtaxError(
                    f"cannot nest under accel=kvm: {blocker}; use --accel tcg, or --inner-accel kvm"
                )
    out: list[Target] = []
    for lv, guest_set in zip(levels, sets, strict=True):
        if lv == "L0":
            out.append(LocalTarget(level="L0"))
            continue
        out.append(
            _qemu_target(lv, sizing, chosen, timeout, inner_accel, guest_net, contents, guest_set)
        )
    if len(out) == 1:
        return out
    # All levels share this machine's CPUs: one boot or run at a time, so that a guest
    # booting or measuring never runs beside the level being measured. The runner's
    # per-target threads then take turns, which interleaves the levels.
    lock = threading.Lock()
    return [OneAtATime(t, lock) for t in out]


class OneAtATime(Target):
    """A target whose prepare and runs hold a lock shared with the other levels.

    The lock keeps two levels from ever running at once; the order in which they run is the
    runner's (``vmtax.turns``), for every target with the same ``machine``."""

    def __init__(self, target: Target, lock: threading.Lock) -> None:
        self.target = target
        self.lock = lock
        self.machine = lock  # the targets that share it take turns
        self.name = target.name
        self.level = target.level

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.__dict__["target"], attr)

    @property
    def last_stderr(self) -> str:  # type: ignore[override]
        return self.target.last_stderr

    def prepare(self) -> None:
        with self.lock:
            self.target.prepare()

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        with self.lock:
            yield from self.target.run_agent(args, timeout)

    def reboot(self) -> None:
        with self.lock:
            self.target.reboot()

    def labels(self) -> dict[str, str]:
        return self.target.labels()

    def capabilities(self) -> Capabilities:
        return self.target.capabilities()

    def place_server(self, spec: ServerSpec) -> AbstractContextManager[PlacedServer]:
        return self.target.place_server(spec)

    def host_end(self, what: str) -> HostEnd:
        return self.target.host_end(what)

    def listeners(self, count: int, what: str) -> list[Listener]:
        return self.target.listeners(count, what)

    def provenance(self) -> dict[str, Any]:
        return {**self.target.provenance(), "levels_run": "one at a time"}

    def environment(self) -> dict[str, Any]:
        return self.target.environment()

    def close(self) -> None:
        self.target.close()

    def cancel(self) -> None:
        # Not under the lock: a level waiting for it must find its target cancelled.
        self.target.cancel()


def _qemu_target(
    level: str,
    sizing: dict[str, Sizing],
    accel: str,
    timeout: float,
    inner_accel: str,
    guest_net: str = "",
    contents: ImageContents = AGENT_ONLY,
    guest_set: str | None = None,
) -> Target:
    n = int(level[1])
    outer = sizing["L1"]
    inner = [(sizing[f"L{k}"].vcpus, sizing[f"L{k}"].memory_mb) for k in range(2, n + 1)]
    spec = GuestSpec(vcpus=outer.vcpus, memory_mb=outer.memory_mb, accel=accel, network=guest_net)
    size = sizing[level]
    kvm_inside = inner_accel == "kvm" and n > 1
    provenance: dict[str, Any] = {
        "sizing": asdict(size),
        "image_mode": "minimal" if n == 1 else f"nested{n}" + ("-kvm" if kvm_inside else ""),
    }
    labels = {"preset": size.preset}
    if guest_set:
        labels["set"] = guest_set
    if n > 1:
        # The labels describe the guest the agent runs in; the L1 under it is in provenance.
        labels["vcpus"], labels["mem_mb"] = str(size.vcpus), str(size.memory_mb)
        provenance["outer_guest"] = asdict(outer)
    if kvm_inside:
        # Honest labels: the agent's guest runs under KVM, and that KVM runs on SVM that TCG
        # emulates (L2) or that the KVM below emulates again (L3).
        labels["accel"] = "kvm"
        labels["kvm_on"] = kvm_on(n, accel)
        provenance["accel_stack"] = [accel] + ["kvm"] * (n - 1)
        # L2 under KVM in TCG took 17-160 s to boot, L3 minutes: far less than TCG in TCG.
        boot = timeout * (5 ** (n - 1))
    else:
        # L2/L3 are booted by a guest (TCG inside TCG) and need far longer to come up.
        boot = timeout * (20 ** (n - 1))
    target = QemuTarget(
        level,
        spec,
        boot_timeout=boot,
        labels=labels,
        provenance=provenance,
        inner=inner,
        inner_accel=inner_accel if n > 1 else "tcg",
        contents=contents,
    )
    if guest_set:
        target.name = f"{target.name}-{guest_set}"  # progress rows and stored targets differ
    return target

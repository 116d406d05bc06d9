"""What a sweep scales, in which steps, for how long, and with which workload.

Axes (the overcommit ratio of each step):

- ``guests``: more guests of a fixed size; ratio = all guests' vCPUs / host CPUs.
- ``vcpus``: a fixed number of guests with more vCPUs each; ratio = vCPUs / host CPUs.
- ``memory``: a fixed number of guests with more memory each, under a cgroup memory cap
  around their QEMU processes; ratio = all guests' memory / the cap.

The ``triplet`` workload (study B's web, app and db guests, see ``tiers`` and ``triplet``)
runs on the guests axis only: a step of k triplets has 3k guests of the ``--tiers`` sizes,
and its ratio is again all guests' vCPUs / host CPUs.

Replicates: every step is measured ``replicates`` times (3 by default), in rounds: each round
boots its guests afresh and measures every step once, in an order drawn from ``order_seed``
(stored with the sweep), so drift of the machine is spread over the ratios instead of
following them. The replicate means are the unit of every interval (``stats.knee``).

Presets: timings ``small`` (the default: 5 s warm-up, 15 s window, 3 s samples; docs/sweep.md
says how they were chosen) and ``study-b`` (5 min, 10 min, 1 min); steps ``default`` (0.5 to
2.5:1, so the knee can sit where the vCPUs begin to outnumber the CPUs, with three interior
steps it can be at) and ``study-b`` (study B's CPU ratios from
``refs/data/zvm_xen2009_overcommit.csv``, with a memory cap that gives its largest memory
ratio at the last step).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vmtax.errors import UsageError
from vmtax.sweep.tiers import DEFAULT_TRIPLETS, TIER_NAMES, TRIPLET_SIZES, TripletSizes

AXES = ("guests", "vcpus", "memory")
WORKLOADS = ("cpu", "threads", "memory", "triplet")
DEFAULT_STEPS = (0.5, 1.0, 1.5, 2.0, 2.5)
#: The smallest guest the minimal image boots and serves in (kernel, initramfs, agent).
MIN_GUEST_MB = 128
#: Replicates of each step by default: the fewest that give a step a t interval with a
#: variance from more than one degree of freedom, within the 10-minute budget on 2 cores.
DEFAULT_REPLICATES = 3
#: Bounds refused up front (exit 2, before anything starts); ``vmtax sweep --help`` states
#: them. A sweep beyond them could not end in any sensible time on one machine.
MAX_STEPS = 32
MAX_REPLICATES = 50
MAX_RATIO = 16.0  # vCPUs (or guest memory) per host CPU (or MiB of the cap)
MAX_SECONDS = 86400.0  # warm-up, window (each)
MIN_INTERVAL_S = 0.1
MAX_SAMPLES = 10000  # window samples of one replicate
MAX_EVENTS = 10_000_000
MAX_THINK_S = 3600.0
#: Host memory a QEMU process takes beyond its guest's RAM (TCG code buffer and devices):
#: the sum over a step's guests of RAM plus this must fit in the host's memory.
QEMU_OVERHEAD_MB = 256


@dataclass(frozen=True)
class Timing:
    warmup_s: float
    window_s: float
    interval_s: float

    def check(self) -> None:
        if self.interval_s <= 0 or self.window_s < self.interval_s or self.warmup_s < 0:
            raise UsageError(
                "timing: need interval > 0, window >= interval and warm-up >= 0 "
                f"(got {self.warmup_s:g}/{self.window_s:g}/{self.interval_s:g} s)"
            )
        if self.window_s / self.interval_s < 2:
            raise UsageError("timing: the window must hold at least 2 samples")

    @property
    def samples(self) -> int:
        return int(self.window_s // self.interval_s)


TIMINGS = {
    "small": Timing(5.0, 15.0, 3.0),
    "study-b": Timing(300.0, 600.0, 60.0),
}


@dataclass(frozen=True)
class StepSize:
    """The guests of one step."""

    index: int
    ratio: float  # achieved (what the sizes give), not just asked for
    asked: float
    vcpus: tuple[int, ...]  # per guest
    memory_mb: tuple[int, ...]  # per guest
    cap_mb: int | None  # the cgroup memory cap around all guests (memory axis, study-b)

    @property
    def guests(self) -> int:
        return len(self.vcpus)


@dataclass(frozen=True)
class SweepSpec:
    axis: str = "guests"
    ratios: tuple[float, ...] = DEFAULT_STEPS
    timing: Timing = field(default_factory=lambda: TIMINGS["small"])
    workload: str = "cpu"
    #: Seconds a client waits between transactions (0: back to back, as study B).
    think_time_s: float = 0.0
    #: Work per transaction: events of the agent's probe.
    events: int = 200
    #: cpu probe's max_prime (TCG guests: 2000 keeps an event near a quarter millisecond).
    max_prime: int = 2000
    host_cpus: int = 2
    #: guests axis: vCPUs and MiB of each guest; vcpus/memory axes: the number of guests.
    guest_vcpus: int = 1
    guest_memory_mb: int = 160
    guests: int = 1
    #: memory axis (and study-b): the cgroup cap in MiB the guests' memory is set against.
    cap_mb: int | None = None
    accel: str = "tcg"
    slo_s: float = 2.0
    steps_preset: str = "default"
    timing_preset: str = "small"
    #: triplet workload: the tiers' sizes preset (``small`` or ``study-b``) and closed-loop
    #: clients per triplet (None: the preset's).
    tiers: str = "small"
    clients_per_triplet: int | None = None
    #: Replicates of each step (rounds of fresh boots) and the seed of their random order.
    replicates: int = DEFAULT_REPLICATES
    order_seed: int = 0
    #: False only with ``--no-intervals``: the user accepts a sweep with no intervals.
    intervals: bool = True
    #: This machine's memory in MiB (0: not checked), for the bound on a step's guests.
    host_memory_mb: int = 0

    @property
    def triplet(self) -> TripletSizes:
        if self.tiers not in TRIPLET_SIZES:
            raise UsageError(
                f"unknown tier sizes {self.tiers!r} (choose {', '.join(TRIPLET_SIZES)})"
            )
        return TRIPLET_SIZES[self.tiers]

    @property
    def clients(self) -> int:
        """Closed-loop clients per triplet."""
        return self.clients_per_triplet or self.triplet.clients

    def triplets(self, ratio: float) -> int:
        """Triplets of a step at ``ratio``: the count whose vCPUs come nearest, at least 1."""
        return max(1, round(ratio * self.host_cpus / self.triplet.vcpus))

    def order(self) -> list[tuple[int, int]]:
        """The run order: (replicate, step index) for every unit, round by round, each
        round's steps in a random order drawn from ``order_seed``."""
        import numpy as np  # heavy: numpy, only when a sweep is planned (`sweep --help` is not)

        rng = np.random.default_rng(self.order_seed)
        n = len(self.ratios)
        return [(r, int(i)) for r in range(self.replicates) for i in rng.permutation(n)]

    def unit(self, replicate: int, step: int) -> int:
        """A unit's index in the store (column ``step_index``): replicate x steps + step,
        so a sweep of one replicate keeps its steps' own indices."""
        return replicate * len(self.ratios) + step

    def check(self) -> None:
        self._check_bounds()
        if self.axis not in AXES:
            raise UsageError(f"unknown axis {self.axis!r} (choose {', '.join(AXES)})")
        if self.workload not in WORKLOADS:
            raise UsageError(f"unknown workload {self.workload!r} (choose {', '.join(WORKLOADS)})")
        if not self.ratios or any(not math.isfinite(r) or r <= 0 for r in self.ratios):
            raise UsageError("steps must be positive ratios, e.g. 0.5,1,1.5,2")
        if list(self.ratios) != sorted(set(self.ratios)):
            raise UsageError("steps must be distinct and increasing, e.g. 0.5,1,1.5,2")
        if self.think_time_s < 0 or self.events < 2 or self.guest_vcpus < 1 or self.guests < 1:
            raise UsageError("think time >= 0, events >= 2, vCPUs >= 1 and guests >= 1")
        if self.guest_memory_mb < MIN_GUEST_MB:
            raise UsageError(f"guest memory must be at least {MIN_GUEST_MB} MiB")
        if self.axis == "memory" and not self.cap_mb:
            raise UsageError("the memory axis needs a memory cap (--cap-mb)")
        if self.axis == "vcpus" and self.workload == "cpu":
            raise UsageError(
                "the vcpus axis needs a workload that uses every vCPU: --workload threads"
            )
        if self.workload == "triplet":
            self._check_triplet()
        self.timing.check()
        self.check_host([self.size(i, r) for i, r in enumerate(self.ratios)])

    def _check_bounds(self) -> None:
        """Absurd sizes, refused before anything is built or booted."""
        if not 1 <= len(self.ratios) <= MAX_STEPS:
            raise UsageError(f"a sweep has 1 to {MAX_STEPS} steps, got {len(self.ratios)}")
        if any(math.isfinite(r) and r > MAX_RATIO for r in self.ratios):
            raise UsageError(f"steps must be at most {MAX_RATIO:g}:1, got {max(self.ratios):g}:1")
        if not 1 <= self.replicates <= MAX_REPLICATES:
            raise UsageError(f"--replicates must be 1 to {MAX_REPLICATES}, got {self.replicates}")
        if self.replicates == 1 and self.intervals:
            raise UsageError(
                "one replicate per step gives no interval: use --replicates 3 or more, or "
                "--replicates 1 --no-intervals"
            )
        if self.replicates == 2:
            # Two replicates give each step interval one degree of freedom (t = 12.7).
            raise UsageError(
                "--replicates 2 gives each step's interval one degree of freedom: use "
                "--replicates 3 or more, or --replicates 1 --no-intervals"
            )
        t = self.timing
        for name, value in (("warm-up", t.warmup_s), ("window", t.window_s)):
            if not (math.isfinite(value) and value <= MAX_SECONDS):
                raise UsageError(f"the {name} must be at most {MAX_SECONDS:g} s, got {value:g}")
        if not (math.isfinite(t.interval_s) and t.interval_s >= MIN_INTERVAL_S):
            raise UsageError(f"the sample interval must be at least {MIN_INTERVAL_S:g} s")
        if t.window_s / t.interval_s > MAX_SAMPLES:
            raise UsageError(f"a window holds at most {MAX_SAMPLES} samples (window / interval)")
        if not (math.isfinite(self.think_time_s) and self.think_time_s <= MAX_THINK_S):
            raise UsageError(f"--think-time must be at most {MAX_THINK_S:g} s")
        if self.events > MAX_EVENTS:
            raise UsageError(f"--events must be at most {MAX_EVENTS:,}")
        host = self.host_memory_mb
        if host and self.guest_memory_mb > host:
            raise UsageError(
                f"--guest-memory {self.guest_memory_mb} MiB is above this machine's {host} MiB"
            )
        if host and self.cap_mb and self.cap_mb > host:
            raise UsageError(f"--cap-mb {self.cap_mb} is above this machine's {host} MiB")
        per_cpu = MAX_RATIO * self.host_cpus
        if self.guest_vcpus > per_cpu or self.guests > per_cpu:
            raise UsageError(
                f"--guest-vcpus and --guests must be at most {per_cpu:g} "
                f"({MAX_RATIO:g} per host CPU)"
            )

    def check_host(self, steps: list[StepSize]) -> None:
        """Every step's guests must fit in this machine's memory (RAM plus QEMU's own)."""
        if not self.host_memory_mb:
            return
        for s in steps:
            need = sum(s.memory_mb) + QEMU_OVERHEAD_MB * s.guests
            if s.cap_mb is None and need > self.host_memory_mb:
                raise UsageError(
                    f"step {s.asked:g}:1 needs {s.guests} guests of {max(s.memory_mb)} MiB "
                    f"({need} MiB with QEMU's own {QEMU_OVERHEAD_MB} MiB each), more than "
                    f"this machine's {self.host_memory_mb} MiB"
                )

    def _check_triplet(self) -> None:
        if self.axis != "guests":
            raise UsageError(
                f"the triplet workload scales triplets on the guests axis only (got {self.axis})"
            )
        if self.clients < 1:
            raise UsageError("a triplet needs at least 1 client")
        counts = [self.triplets(r) for r in self.ratios]
        for a, b, n in zip(self.ratios, self.ratios[1:], counts[1:], strict=False):
            if n == self.triplets(a):
                raise UsageError(
                    f"steps {a:g} and {b:g} both give {n} triplet(s) of "
                    f"{self.triplet.vcpus} vCPUs on {self.host_cpus} CPUs: use steps "
                    f"{self.triplet.vcpus / self.host_cpus:g}:1 apart"
                )

    def size(self, index: int, ratio: float) -> StepSize:
        """The guests of the step at ``ratio`` on this spec's machine."""
        if self.workload == "triplet":
            k = self.triplets(ratio)
            vcpus = tuple(self.triplet.tier(t)[0] for t in TIER_NAMES) * k
            mem = tuple(self.triplet.tier(t)[1] for t in TIER_NAMES) * k
            achieved = k * self.triplet.vcpus / self.host_cpus
        elif self.axis == "guests":
            n = max(1, round(ratio * self.host_cpus / self.guest_vcpus))
            vcpus = (self.guest_vcpus,) * n
            mem = (self.guest_memory_mb,) * n
            achieved = n * self.guest_vcpus / self.host_cpus
        elif self.axis == "vcpus":
            total = max(self.guests, round(ratio * self.host_cpus))
            vcpus = tuple(
                total // self.guests + (i < total % self.guests) for i in range(self.guests)
            )
            mem = (self.guest_memory_mb,) * self.guests
            achieved = total / self.host_cpus
        else:
            assert self.cap_mb
            each = int(ratio * self.cap_mb / self.guests)
            if each < MIN_GUEST_MB:
                raise UsageError(
                    f"step {ratio:g}:1 gives each of {self.guests} guests {each} MiB, below "
                    f"{MIN_GUEST_MB}: raise --cap-mb or use fewer guests"
                )
            vcpus = (self.guest_vcpus,) * self.guests
            mem = (each,) * self.guests
            achieved = each * self.guests / self.cap_mb
        return StepSize(index, round(achieved, 4), ratio, vcpus, mem, self.cap_mb)

    def steps(self) -> list[StepSize]:
        return [self.size(i, r) for i, r in enumerate(self.ratios)]

    def as_plan(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratios"] = list(self.ratios)
        return out

    @classmethod
    def from_plan(cls, plan: dict[str, Any]) -> SweepSpec:
        data = dict(plan)
        data["ratios"] = tuple(data["ratios"])
        data["timing"] = Timing(**data["timing"])
        # Sweeps stored before replicates measured each step once.
        data.setdefault("replicates", 1)
        data.setdefault("intervals", data["replicates"] > 1)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def study_b_steps(platform: str = "z/VM") -> tuple[tuple[float, ...], float | None]:
    """Study B's CPU overcommit ratios and its largest memory overcommit, from the dataset."""
    from vmtax.refs.datasets import load  # heavy: pandas, only for study B's steps

    df = load("zvm_xen2009_overcommit")
    rows = df[df["platform"] == platform]
    if rows.empty:
        raise UsageError(f"study B has no platform {platform!r} (z/VM or Xen)")
    ratios = tuple(float(r) for r in rows["cpu_overcommit"])
    mem = [float(m) for m in rows["memory_overcommit"] if m]
    return ratios, (max(mem) if mem else None)


def apply_presets(spec: SweepSpec, *, steps: str, timing: str) -> SweepSpec:
    """The spec with a steps preset (``default``/``study-b``) and a timing preset."""
    if timing not in TIMINGS:
        raise UsageError(f"unknown timing preset {timing!r} (choose {', '.join(TIMINGS)})")
    spec = replace(spec, timing=TIMINGS[timing], timing_preset=timing)
    if steps == "default":
        if spec.workload == "triplet":
            spec = replace(spec, ratios=triplet_ratios(spec, DEFAULT_TRIPLETS))
        return replace(spec, steps_preset=steps)
    if steps != "study-b":
        raise UsageError(f"unknown steps preset {steps!r} (choose default or study-b)")
    ratios, mem_ratio = study_b_steps()
    if spec.workload == "triplet":
        # Study B's ratios as triplets on this machine; ratios that round to the same
        # number of triplets are one step.
        ratios = triplet_ratios(spec, tuple(dict.fromkeys(spec.triplets(r) for r in ratios)))
    spec = replace(spec, ratios=ratios, steps_preset=steps)
    if spec.axis == "guests" and mem_ratio and spec.cap_mb is None:
        # The study's memory overcommit at its last step, scaled to these guests.
        last = spec.size(len(ratios) - 1, ratios[-1])
        spec = replace(spec, cap_mb=int(sum(last.memory_mb) / mem_ratio))
    return spec


def triplet_ratios(spec: SweepSpec, counts: tuple[int, ...]) -> tuple[float, ...]:
    """The ratios of steps of ``counts`` triplets on the spec's machine."""
    return tuple(round(k * spec.triplet.vcpus / spec.host_cpus, 4) for k in counts)

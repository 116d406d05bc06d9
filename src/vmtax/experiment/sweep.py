"""The sweep use case (study B): validate once, size the grid, open the store, execute, resume.

`vmtax sweep` and :func:`vmtax.api.sweep` both start sweeps here; the CLI only parses its
options into a :class:`SweepRequest` and renders what comes back (a line per unit, the
table). ``vmtax.sweep`` does the work: the spec and its seeded replicate order, the runner,
the guests, the store and the summary with its knee.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from vmtax.errors import UsageError, VmtaxError
from vmtax.execution import Progress, Storing
from vmtax.experiment.command import command_line
from vmtax.experiment.run import open_existing
from vmtax.runner import controller_identity
from vmtax.store import Store
from vmtax.sweep.guests import local_factory, qemu_factory
from vmtax.sweep.run import GuestFactory, StepOutcome, SweepRunner, spec_for_resume
from vmtax.sweep.spec import DEFAULT_REPLICATES, SweepSpec, Timing, apply_presets
from vmtax.sweep.tiers import TRIPLET_EVENTS
from vmtax.targets.accel import choose_accel
from vmtax.targets.levels import host_resources
from vmtax.version import __version__
from vmtax.workloads import webapp

if TYPE_CHECKING:
    from vmtax.sweep.summary import SweepSummary

Notice = Callable[[str], None]
STEP_PRESETS = ("default", "study-b")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class SweepRequest:
    """Every option of one `vmtax sweep` (the defaults are the CLI's)."""

    axis: str = "guests"
    #: A preset (default, study-b), ratios as text ("0.5,1,1.5"), or the ratios themselves.
    steps: str | Sequence[float] = "default"
    replicates: int = DEFAULT_REPLICATES
    intervals: bool = True
    order_seed: int | None = None  # None: drawn at random, and stored
    timing: str = "small"
    warmup: float | None = None
    window: float | None = None
    interval: float | None = None
    workload: str = "cpu"
    think_time: float = 0.0
    events: int | None = None
    max_prime: int = 2000
    guest_vcpus: int | None = None
    guest_memory: int | None = None
    guests: int = 1
    tiers: str = "small"
    clients: int | None = None
    cap_mb: int | None = None
    level: str = "L1"
    accel: str = "auto"
    slo: float = 2.0
    boot_timeout: float = 300.0
    db: str | None = None
    #: The command line stored with the experiment (its --db shown without a password).
    argv: list[str] = field(default_factory=list)

    def validate(self) -> SweepSpec:
        """Refuse what cannot run, in one line (UsageError), before anything starts (a
        resumed sweep too: its spec comes from the store, its options are checked alike);
        the sweep's spec on this machine (its accelerator is chosen when it starts)."""
        if self.level not in ("L0", "L1"):
            raise UsageError(f"--level must be L0 or L1, got {self.level!r}")
        if self.workload == "triplet" and (self.guest_vcpus or self.guest_memory):
            raise UsageError(
                "--guest-vcpus and --guest-memory size plain guests; the triplet's tiers are "
                "sized by --tiers (small or study-b)"
            )
        if self.workload == "triplet":
            _triplet_can_run(self.level)
        check_boot_timeout(self.boot_timeout)
        cpus, host_mb = host_resources()
        spec = SweepSpec(
            axis=self.axis,
            workload="threads"
            if self.axis == "vcpus" and self.workload == "cpu"
            else self.workload,
            think_time_s=self.think_time,
            events=self.events or (TRIPLET_EVENTS if self.workload == "triplet" else 200),
            max_prime=self.max_prime,
            host_cpus=cpus,
            guest_vcpus=self.guest_vcpus or 1,
            guest_memory_mb=self.guest_memory or 160,
            guests=self.guests,
            cap_mb=self.cap_mb,
            accel="none",
            slo_s=self.slo,
            tiers=self.tiers,
            clients_per_triplet=self.clients,
            replicates=self.replicates,
            intervals=self.intervals,
            order_seed=secrets.randbits(32) if self.order_seed is None else self.order_seed,
            host_memory_mb=host_mb,
        )
        if not 0 <= spec.order_seed < 2**63:
            raise UsageError(f"--order-seed must be 0 to 2^63-1, got {spec.order_seed}")
        custom = _custom_ratios(self.steps)
        if custom is not None:  # bounds first: a preset must not size absurd steps
            replace(spec, ratios=custom)._check_bounds()
        preset = self.steps if isinstance(self.steps, str) and custom is None else "default"
        spec = apply_presets(spec, steps=preset, timing=self.timing)
        if custom is not None:
            spec = replace(spec, ratios=custom, steps_preset="custom")
        t = spec.timing
        spec = replace(
            spec,
            timing=Timing(
                t.warmup_s if self.warmup is None else self.warmup,
                t.window_s if self.window is None else self.window,
                t.interval_s if self.interval is None else self.interval,
            ),
        )
        spec.check()
        return spec


@dataclass
class SweepResult:
    """A sweep after `run_sweep` or `resume_sweep`: its id, spec and level, the units this
    call ran, and its store (open until :meth:`close`)."""

    experiment_id: int
    store: Store
    spec: SweepSpec
    level: str
    units: list[StepOutcome]

    def summary(self) -> SweepSummary:
        """Per step figures and the analysis (knee, why flat, response-time rise, SLO)."""
        return sweep_summary(self.store, self.experiment_id)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> SweepResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_sweep(
    request: SweepRequest, *, progress: Progress | None = None, notice: Notice = _to_stderr
) -> SweepResult:
    """Start a sweep as `vmtax sweep` does and run every unit (or up to a failure: the units
    before it stay stored, and SweepError says which step failed)."""
    spec = request.validate()
    if request.level == "L1":
        # After the checks: probing KVM can take seconds, a usage error should not. Before
        # the store: an accelerator refused leaves no empty store behind.
        spec = replace(spec, accel=choose_accel(request.accel))
    store = Store.open(request.db)
    try:
        exp_id = store.create_experiment(
            command=command_line(request.argv, store.url_display),
            suite="sweep",
            seed=spec.order_seed,
            plan={
                "sweep": spec.as_plan(),
                "level": request.level,
                "controller": controller_identity(),
            },  # fmt: skip
            vmtax_version=__version__,
            agent_version=None,
        )
        # The guests' image can take minutes: a Ctrl-C or an error meanwhile ends the sweep.
        with Storing(store, exp_id).settling(only_if_stopped=True):
            factory = _factory(spec, request.level, request.boot_timeout)
        units = _execute(store, spec, factory, exp_id, request.level, progress, notice)
    except BaseException:
        store.close()
        raise
    return SweepResult(exp_id, store, spec, request.level, units)


def resume_sweep(
    ref: int | str,
    *,
    db: str | None = None,
    boot_timeout: float = 300.0,
    progress: Progress | None = None,
    notice: Notice = _to_stderr,
) -> SweepResult:
    """Run the units of a sweep without an ``ok`` row, in its stored order: ``ref`` is its
    experiment id or ``latest`` (the newest sweep), as `resume` takes a run's."""
    check_boot_timeout(boot_timeout)
    which = _sweep_ref(ref)  # a bad reference is a usage error, before the store opens
    store = open_existing(db)  # a missing store is refused, not created empty
    try:
        experiment_id = sweep_id(store, which)
        plan = store.experiment(experiment_id).get("plan") or {}
        spec = spec_for_resume(plan)
        level = str(plan.get("level", "L1"))
        store.reopen_experiment(experiment_id, controller_identity())
        with Storing(store, experiment_id).settling(only_if_stopped=True):
            factory = _factory(spec, level, boot_timeout)
        units = _execute(store, spec, factory, experiment_id, level, progress, notice)
    except BaseException:
        store.close()
        raise
    return SweepResult(experiment_id, store, spec, level, units)


def sweep_id(store: Store, which: str) -> int:
    """A sweep's experiment id from ``N`` or ``latest`` (the newest sweep in ``store``)."""
    which = _sweep_ref(which)
    if which == "latest":
        found = store.sweeps.latest()
        if found is None:
            raise VmtaxError("no sweep in the store yet (run `vmtax sweep`)")
        return found
    return int(which)


def _sweep_ref(ref: int | str) -> str:
    """``ref`` as ``latest`` or the digits of an id (``exp=N`` too); else a UsageError."""
    text = str(ref).strip().lower().removeprefix("exp=")
    if text != "latest" and not (text.isascii() and text.isdigit()):
        raise UsageError(f"EXP must be an experiment id or latest, got {str(ref)!r}")
    return text


def stored_sweep(which: str, *, db: str | None = None) -> SweepSummary:
    """The summary of a stored sweep (``which``: an id or ``latest``), read-only."""
    store = Store.open(db, read_only=True)
    try:
        summary = sweep_summary(store, sweep_id(store, which))
    finally:
        store.close()
    if not summary.steps:
        exp = summary.experiment_id
        raise VmtaxError(
            f"sweep {exp} has no step stored ({summary.status} before its first step ended): "
            f"nothing to show yet; `vmtax sweep --resume {exp}` measures its steps"
        )
    return summary


def sweep_summary(store: Store, experiment_id: int) -> SweepSummary:
    """A stored sweep's per step figures and analysis (``vmtax.sweep.summary``)."""
    # The knee's statistics pull in scipy (over a second): loaded only when a summary is
    # asked for, not whenever the CLI starts.
    from vmtax.sweep.summary import summarise

    return summarise(store, experiment_id)


def _execute(
    store: Store,
    spec: SweepSpec,
    factory: GuestFactory,
    exp_id: int,
    level: str,
    progress: Progress | None,
    notice: Notice,
) -> list[StepOutcome]:
    notice(
        f"vmtax: sweep experiment {exp_id}: {len(spec.ratios)} steps x {spec.replicates} "
        f"replicates, order seed {spec.order_seed}"
    )
    runner = SweepRunner(store, spec, factory, level=level, progress=progress)
    return runner.execute(exp_id)


def check_boot_timeout(seconds: float) -> None:
    """--boot-timeout: above 0 and at most an hour (a start and a resume alike)."""
    if not (0 < seconds <= 3600):
        raise UsageError(f"--boot-timeout must be above 0 and at most 3600 s, got {seconds}")


def _custom_ratios(steps: str | Sequence[float]) -> tuple[float, ...] | None:
    """The ratios asked for, or None for a preset (whose name is checked with the presets)."""
    if not isinstance(steps, str):
        return tuple(float(x) for x in steps)
    if steps in STEP_PRESETS:
        return None
    try:
        return tuple(float(x) for x in steps.split(",") if x.strip())
    except ValueError:
        raise UsageError(
            f"--steps must be ratios like 0.5,1,1.5,2 or a preset, got {steps!r}"
        ) from None


def _triplet_can_run(level: str) -> None:
    """The triplet's servers run in QEMU guests from an image with PHP: say so in one line
    before an experiment is made."""
    if level != "L1":
        raise UsageError("the triplet workload runs its tiers in QEMU guests: use --level L1")
    webapp.extension_dir(webapp.php_cgi())


def _factory(spec: SweepSpec, level: str, boot_timeout: float) -> GuestFactory:
    if level == "L0":
        return local_factory(spec)
    return qemu_factory(spec, boot_timeout=boot_timeout)

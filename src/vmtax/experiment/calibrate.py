"""Noise profiles as use cases: `vmtax calibrate` (a dimensioning experiment, stored as a
profile), `vmtax calibrate show`, the design `vmtax run` takes from a profile, and the growth
of a profile by every later experiment of its machine and configuration (vmtax.noise).

A profile is keyed by this machine (``noise.profile.machine_key`` of the local environment
fingerprint) and the configuration as the request names it (:func:`profile_labels`). A run
uses one only when both match, the profile is readable and fresh, and it has every probe of
the run; otherwise it says why in one line and keeps today's design.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError, VmtaxError
from vmtax.experiment.request import DEFAULT_BOOTS as RUN_BOOTS
from vmtax.experiment.request import RunRequest
from vmtax.noise import plan as noise_plan
from vmtax.noise.components import Components, source
from vmtax.noise.profile import (
    ProbeProfile,
    ProfileError,
    configuration_key,
    differences,
    machine_fields,
    machine_key,
)
from vmtax.stats.boots import ExternalBetween
from vmtax.store import Store
from vmtax.targets.spec import LevelSpec, TargetSpec, parse_spec

Notice = Callable[[str], None]
#: Boots of a calibration when --boots is not given (Kalibera and Jones' dimensioning
#: experiment: enough boots that the between-boot variance has 7 degrees of freedom).
DEFAULT_BOOTS = 8
#: The fewest boots and runs per boot that estimate both components (one degree of freedom
#: between boots, one within).
MIN_BOOTS = 2
MIN_RUNS_PER_BOOT = 2
DEFAULT_RUNS_PER_BOOT = 3
#: A profile last grown longer ago than this is stale: `vmtax run` does not plan from it.
STALE_AFTER = timedelta(days=30)


def profile_labels(spec: LevelSpec, labels: dict[str, str], duration: float | None,
                   suite: str) -> dict[str, str]:  # fmt: skip
    """The configuration a profile describes, as the request names it: the level, its
    preset and accelerators, the guest network, the run length (``--duration`` or the
    suite's), and the user's labels (never ``set``: both sides of an A/A are one
    configuration)."""
    out = {"level": spec.level, "preset": spec.preset, "accel": spec.accel}
    if spec.level in ("L2", "L3"):
        out["inner_accel"] = spec.inner_accel
    if spec.guest_net:
        out["guest_net"] = spec.guest_net
    out["duration"] = f"{duration:g}s" if duration is not None else f"suite:{suite}"
    out.update({k: v for k, v in labels.items() if k not in out})
    return out


# -- calibrate ---------------------------------------------------------------------------


@dataclass
class CalibrateRequest:
    """Every option of `vmtax calibrate` (the defaults are the CLI's)."""

    levels: str = "L1"
    boots: int = DEFAULT_BOOTS
    runs_per_boot: int = DEFAULT_RUNS_PER_BOOT
    suite: str = "quick"
    probes: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    preset: str = "seed-c"
    accel: str = "auto"
    inner_accel: str = "tcg"
    guest_net: str = ""
    duration: float | None = None
    timeout: float | None = None
    seed: int | None = None
    db: str | None = None
    argv: list[str] = field(default_factory=list)

    def run_request(self) -> RunRequest:
        """The run that measures the calibration, refused in one line (UsageError) when it
        cannot give a profile: not one guest configuration, or too few boots or runs."""
        if self.boots < MIN_BOOTS:
            raise UsageError(
                f"--boots {self.boots}: a between-boot variance needs at least {MIN_BOOTS} "
                f"boots (a calibration should have {DEFAULT_BOOTS} or more)"
            )
        if self.runs_per_boot < MIN_RUNS_PER_BOOT:
            raise UsageError(
                f"--runs-per-boot {self.runs_per_boot}: the within-boot variance needs at "
                f"least {MIN_RUNS_PER_BOOT} runs in a boot"
            )
        names = [x.strip().upper() for x in self.levels.split(",") if x.strip()]
        if len(names) != 1:
            raise UsageError(
                f"--levels {self.levels}: a calibration measures one configuration, e.g. "
                "--levels L1"
            )
        if names[0] == "L0":
            raise UsageError(
                "--levels L0: this machine has one boot, so it has no between-boot variance "
                "to calibrate; name a guest level, e.g. --levels L1"
            )
        request = RunRequest(
            suite=self.suite, probes=list(self.probes), runs=self.boots * self.runs_per_boot,
            labels=list(self.labels), db=self.db, timeout=self.timeout, duration=self.duration,
            seed=self.seed, levels=names[0], preset=self.preset, accel=self.accel,
            inner_accel=self.inner_accel, guest_net=self.guest_net, boots=self.boots,
            argv=list(self.argv),
        )  # fmt: skip
        request.validate()
        return request


@dataclass(frozen=True)
class Calibrated:
    """A calibration's experiment and the profiles it stored (one per probe)."""

    experiment_id: int
    profiles: list[ProbeProfile]
    seconds: float
    skipped: list[str]  # probes that gave no profile, with why


#: How a calibration measures: the run request in, (experiment id, its open store) out.
#: `vmtax calibrate` runs it (:func:`measure`); a test hands in simulated runs instead.
Measure = Callable[[RunRequest], tuple[int, Store]]


def measure(request: RunRequest, progress: Any = None) -> tuple[int, Store]:  # noqa: ANN401
    """Run the calibration's experiment as `vmtax run` does (boots, runs, store)."""
    # The run use case, and with it the targets and the runner, only when one is measured.
    from vmtax.experiment.report import Reporting
    from vmtax.experiment.run import run

    # The run's own word on profiles ("not used: --runs given") is not the calibration's, and
    # nor is its report: on this machine writing it took half a calibration's 20 minutes.
    done = run(
        request, progress=progress, notice=_not_about_profiles, reporting=Reporting(write=False)
    )
    if done.problem:
        raise VmtaxError(f"calibration experiment {done.experiment_id}: {done.problem}")
    return done.experiment_id, done.store


def _not_about_profiles(line: str) -> None:
    if not line.startswith("noise profile"):
        print(line, file=sys.stderr)


def calibrate(
    request: CalibrateRequest, *, fingerprint: dict[str, Any], measure_with: Measure = measure
) -> Calibrated:
    """Validate, measure, estimate every probe's components and store them as profiles of
    this machine (``fingerprint``: its environment) and the configuration."""
    run_request = request.run_request()
    started = datetime.now(UTC)
    exp_id, store = measure_with(run_request)
    try:
        spec = _guest_specs(run_request)[0]
        labels = profile_labels(spec, run_request.validate().labels, request.duration,
                                request.suite)  # fmt: skip
        fields = machine_fields(fingerprint)
        profiles, skipped = _profiles_of(store, exp_id, fields, {_SPEC_KEY(spec): labels},
                                         fresh=True)  # fmt: skip
        if not profiles:
            raise VmtaxError(
                f"calibration experiment {exp_id} gave no profile: {'; '.join(skipped)}"
            )
        store.noise.save([p.row() for p in profiles])
    finally:
        store.close()
    seconds = (datetime.now(UTC) - started).total_seconds()
    return Calibrated(exp_id, profiles, seconds, skipped)


def _SPEC_KEY(spec: LevelSpec) -> tuple[str, str | None]:  # noqa: N802 - a key function
    return (spec.level, spec.set)


def _guest_specs(request: RunRequest) -> list[LevelSpec]:
    specs = request.target_specs(request.validate().levels)
    return [s for s in specs if isinstance(s, LevelSpec) and s.is_guest]


def _profiles_of(
    store: Store,
    exp_id: int,
    fields: dict[str, Any],
    wanted: dict[tuple[str, str | None], dict[str, str]],
    *,
    fresh: bool,
    existing: dict[tuple[str, str], ProbeProfile] | None = None,
) -> tuple[list[ProbeProfile], list[str]]:
    """Profiles from one experiment's guest configurations in ``wanted`` ((level, set) ->
    profile labels): new ones (``fresh``), or ``existing`` ones grown by it."""
    runs = store.noise.experiment_runs(exp_id)
    configs = store.configurations()
    configs = configs[configs["experiment_id"] == exp_id]
    machine = machine_key(fields)
    now = datetime.now(UTC)
    out: dict[tuple[str, str], ProbeProfile] = {}
    skipped: list[str] = []
    # The two sides of an A/A test (set=a, set=b) are one configuration: their runs make one
    # source. A source per side would keep only the last side's boots, since a profile counts
    # an experiment once (Components.folded replaces a source of the same experiment).
    sides: dict[str, tuple[dict[str, str], list[pd.DataFrame], list[float]]] = {}
    for row in configs.itertuples():
        stored: dict[str, str] = dict(row.labels or {})  # type: ignore[arg-type]
        key = (str(row.level), stored.get("set"))
        if key not in wanted:
            continue
        config = configuration_key(wanted[key])
        side = runs[(runs["configuration_id"] == row.configuration_id) & (runs["status"] == "ok")]
        _, frames, costs = sides.setdefault(config, (wanted[key], [], []))
        frames.append(side)
        side_cost = _boot_cost(side, row.provenance)
        if side_cost is not None:
            costs.append(side_cost)
    for config, (plabels, frames, costs) in sides.items():
        mine = pd.concat(frames)
        boot_cost = float(np.median(costs)) if costs else None
        for probe, pruns in mine.groupby("probe", sort=True):
            means = pd.to_numeric(pruns["mean"], errors="coerce").to_numpy(dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                logs = np.where(means > 0, np.log(means), np.nan)
            boots = [b if isinstance(b, str) and b else "?" for b in pruns["boot_id"]]
            src = source(logs, boots, experiment_id=exp_id)
            if src is None:
                skipped.append(f"{probe}: fewer than 2 boots or no boot with 2 runs")
                continue
            run_cost = _run_cost(pruns)
            at = (config, str(probe))
            before = out.get(at) or (existing or {}).get(at)
            if before is not None:
                out[at] = before.folded(src, boot_cost_s=boot_cost, run_cost_s=run_cost, now=now)
            elif fresh:
                out[at] = ProbeProfile(
                    machine=machine, machine_fields=fields, configuration=config,
                    labels=plabels, probe=str(probe), components=Components((src,)),
                    boot_cost_s=boot_cost, run_cost_s=run_cost, made_at=now, updated_at=now,
                )  # fmt: skip
    return list(out.values()), skipped


def _run_cost(runs: pd.DataFrame) -> float | None:
    """A run's cost in seconds: the median time the controller spent on it (start to end,
    the agent's start-up included), else its measured wall time."""
    start = pd.to_numeric(runs["started_ns"], errors="coerce")
    end = pd.to_numeric(runs["ended_ns"], errors="coerce")
    spent = ((end - start) / 1e9).to_numpy(dtype=np.float64)
    spent = spent[np.isfinite(spent) & (spent > 0)]
    if spent.size == 0:
        spent = pd.to_numeric(runs["wall_s"], errors="coerce").to_numpy(dtype=np.float64)
        spent = spent[np.isfinite(spent) & (spent > 0)]
    return float(np.median(spent)) if spent.size else None


def _boot_cost(runs: pd.DataFrame, provenance: Any) -> float | None:  # noqa: ANN401 - JSON
    """A boot's cost in seconds: the median gap between the last run of one boot and the
    first of the next (the old guest stopped, the new one booted and fingerprinted), else
    the boot time the target recorded for its first boot."""
    timed = runs.dropna(subset=["started_ns", "ended_ns"]).sort_values("started_ns")
    gaps = []
    prev_boot, prev_end = None, None
    for boot, start, end in zip(timed["boot_id"], timed["started_ns"], timed["ended_ns"],
                                strict=True):  # fmt: skip
        if prev_boot is not None and boot != prev_boot and prev_end is not None:
            gaps.append((float(start) - float(prev_end)) / 1e9)
        prev_boot, prev_end = boot, end
    gaps = [g for g in gaps if g > 0]
    if gaps:
        return float(np.median(gaps))
    recorded = (provenance or {}).get("boot_seconds") if isinstance(provenance, dict) else None
    if isinstance(recorded, int | float) and recorded > 0:
        return float(recorded)
    return None


# -- show --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """Every stored profile that reads back, and one line for each that does not."""

    profiles: list[ProbeProfile]
    unreadable: list[str]
    store: str


def show(db: str | None) -> Shown:
    """The stored profiles (`vmtax calibrate show`)."""
    store = Store.open(db, read_only=True)
    try:
        rows = store.noise.rows()
        shown = store.url_display
    finally:
        store.close()
    profiles, bad = _parsed(rows)
    return Shown(profiles, bad, shown)


def _parsed(rows: Sequence[dict[str, Any]]) -> tuple[list[ProbeProfile], list[str]]:
    profiles, bad = [], []
    for row in rows:
        try:
            profiles.append(ProbeProfile.from_row(row))
        except ProfileError as exc:
            where = f"{str(row.get('configuration'))[:80]}, " if row.get("configuration") else ""
            bad.append(f"{where}{exc}")
    return profiles, bad


# -- a run's design from a profile -------------------------------------------------------


@dataclass(frozen=True)
class RunDesign:
    """What `vmtax run` does about noise profiles: ``line`` says it; with ``boots`` and
    ``runs`` (runs per probe and configuration) set, the run takes that design."""

    line: str
    boots: int | None = None
    runs: int | None = None
    design: noise_plan.Design | None = None


def run_design(
    request: RunRequest,
    specs: Sequence[TargetSpec],
    labels: dict[str, str],
    fingerprint: dict[str, Any],
    probes: Sequence[str],
    precision: float | None,
    *,
    budget: float | None = None,
    now: datetime | None = None,
) -> RunDesign | None:
    """The design a profile gives this run, or why none (None: no guest level, nothing to
    say). Never raises for a profile or a store: a run goes on with today's design."""
    guests = [s for s in specs if isinstance(s, LevelSpec) and s.is_guest]
    if not guests:
        return None
    today = "today's design"
    if request.runs is not None or request.boots is not None or precision is None:
        # The design is fixed (--runs, --boots, or a suite without a precision): nothing of a
        # profile would change it, so nothing is said about one.
        return None
    try:
        rows = _stored_rows(request.db)
    except VmtaxError as exc:
        return RunDesign(f"noise profile: none read ({exc.message}); {today}")
    if rows is None:
        return RunDesign(
            f"noise profile: none (no store yet; `vmtax calibrate` makes one); {today}"
        )
    fields = machine_fields(fingerprint)
    here = machine_key(fields)
    wanted = {
        configuration_key(profile_labels(s, labels, request.duration, request.suite))
        for s in guests
    }
    mine = [r for r in rows if r.get("machine") == here]
    if not mine:
        return RunDesign(_no_machine_line(rows, fields, wanted) + f"; {today}")
    profiles, bad = _parsed([r for r in mine if r.get("configuration") in wanted])
    found = {p.configuration for p in profiles}
    missing = sorted(wanted - found)
    if missing:
        why = f"; unreadable: {bad[0]}" if bad else ""
        have = sorted({str(r.get("configuration")) for r in mine})
        return RunDesign(
            f"noise profile: none for {missing[0]} on this machine (profiles here: "
            f"{', '.join(have[:3])}{' ...' if len(have) > 3 else ''}){why}; {today}"
        )
    when = now or datetime.now(UTC)
    chosen: list[ProbeProfile] = []
    for config in sorted(wanted):
        of = {p.probe: p for p in profiles if p.configuration == config}
        lacking = [p for p in probes if p not in of]
        if lacking:
            why = f" (unreadable: {bad[0]})" if bad else ""
            return RunDesign(
                f"noise profile {config}: has no {', '.join(lacking[:3])}{why}; {today}"
            )
        for probe in probes:
            p = of[probe]
            age = when - _aware(p.updated_at)
            if age > STALE_AFTER:
                return RunDesign(
                    f"noise profile {config}: stale (last grown {age.days} days ago; "
                    f"`vmtax calibrate` renews it); {today}"
                )
            if p.run_cost_s is None:
                return RunDesign(f"noise profile {config}: {probe} has no run cost; {today}")
            chosen.append(p)
    boot_cost = max((p.boot_cost_s or request.boot_cost) for p in chosen)
    # Said in the line: the profile's measured boots, or (a profile without them) the run's.
    measured = all(p.boot_cost_s for p in chosen)
    boot_from = "measured" if measured else "--boot-cost" if request.boot_cost_s else "default"
    design = noise_plan.joint(
        [(p.components.between, p.components.within, p.run_cost_s or 0.0) for p in chosen],
        boot_cost,
        precision,
    )
    configs = len(wanted)
    total = design.seconds * len(guests)
    reach = (
        f"±{100 * design.half_width:.1f}% expected"
        if design.reached
        else f"only ±{100 * design.half_width:.1f}% within {design.boots} boots"
    )
    if budget is not None and total > budget:
        # The time budget bounds the run as it bounds adaptive sampling: the design is the
        # most precise that fits in it, in as many boots as today's design at least; when
        # fewer fit, today's design (adaptive, stopped by the budget) is kept. Either way the
        # line says what the target would have cost.
        fits = noise_plan.within_budget(
            [(p.components.between, p.components.within, p.run_cost_s or 0.0) for p in chosen],
            boot_cost,
            budget,
            configurations=len(guests),
        )
        wanted_cost = (
            f"±{100 * precision:g}% would take {design.boots} boots × {design.runs_per_boot} "
            f"runs of each probe per guest configuration, about {total:.0f} s, more than the "
            f"{budget:g} s budget"
        )
        if fits is None or fits.boots < RUN_BOOTS:
            return RunDesign(
                f"noise profile {', '.join(sorted(wanted))} (machine {here[:12]}): "
                f"{wanted_cost}, which fits fewer than {RUN_BOOTS} boots; {today}"
            )
        reach = f"{wanted_cost}; within it ±{100 * fits.half_width:.1f}% expected"
        design, total = fits, fits.seconds * len(guests)
    made = min(_aware(p.made_at) for p in chosen).date().isoformat()
    line = (
        f"noise profile {', '.join(sorted(wanted))} (machine {here[:12]}, "
        f"{chosen[0].components.boots} boots from {len(chosen[0].experiments)} experiment(s), "
        f"made {made}{'' if configs == 1 else f', {configs} configurations'}): planned "
        f"{design.boots} boots × {design.runs_per_boot} runs of each probe per guest "
        f"configuration, about {total:.0f} s ({design.seconds:.0f} s each; boot "
        f"{boot_cost:.1f} s, {boot_from}), for ±{100 * precision:g}% at the boot level ({reach}); "
        "then boots are added while the interval is wider and the budget lasts"
    )
    return RunDesign(line, design.boots, design.boots * design.runs_per_boot, design)


def _stored_rows(db: str | None) -> list[dict[str, Any]] | None:
    """Every profile row, or None when there is no store yet (nothing is created)."""
    try:
        store = Store.open(db, read_only=True)
    except VmtaxError as exc:
        if "no such file" in exc.message:
            return None
        raise
    try:
        return store.noise.rows()
    finally:
        store.close()


def _no_machine_line(
    rows: Sequence[dict[str, Any]], fields: dict[str, Any], wanted: set[str]
) -> str:
    same_config = [r for r in rows if r.get("configuration") in wanted]
    if not same_config:
        return "noise profile: none for this machine (`vmtax calibrate` makes one)"
    other = same_config[0].get("machine_fields")
    diff = differences(other, fields) if isinstance(other, dict) else []
    host = other.get("hostname") if isinstance(other, dict) else "?"
    return (
        f"noise profile: none for this machine; {same_config[0].get('configuration')} has one "
        f"from another machine ({host}; differs in {'; '.join(diff[:2]) or 'its fields'}), "
        "not used"
    )


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


# -- growing -----------------------------------------------------------------------------


def grow(
    store: Store,
    exp_id: int,
    specs: Sequence[TargetSpec | dict[str, Any]],
    labels: dict[str, str],
    fingerprint: dict[str, Any],
    *,
    duration: float | None,
    suite: str,
) -> str | None:
    """Fold one finished experiment's guest configurations (two boots or more) into the
    matching profiles of this machine; one line saying what grew, or None when nothing
    did. A profile is grown, never made here (`vmtax calibrate` makes one)."""
    wanted = {}
    for raw in specs:
        spec = parse_spec(raw) if isinstance(raw, dict) else raw
        if isinstance(spec, LevelSpec) and spec.is_guest and spec.boot_count >= 2:
            wanted[_SPEC_KEY(spec)] = profile_labels(spec, labels, duration, suite)
    if not wanted:
        return None
    fields = machine_fields(fingerprint)
    existing_rows = store.noise.rows(machine_key(fields))
    parsed, _ = _parsed(existing_rows)
    keys = {configuration_key(x) for x in wanted.values()}
    existing = {(p.configuration, p.probe): p for p in parsed if p.configuration in keys}
    if not existing:
        return None
    grown, _ = _profiles_of(store, exp_id, fields, wanted, fresh=False, existing=existing)
    if not grown:
        return None
    store.noise.save([p.row() for p in grown])
    configs = sorted({p.configuration for p in grown})
    boots = max(p.components.boots for p in grown)
    return (
        f"noise profile {', '.join(configs)}: grown by experiment {exp_id} "
        f"({len(grown)} probes, now up to {boots} boots)"
    )


# -- a comparison's between-boot variance --------------------------------------------------


def noise_keys(
    specs: Sequence[TargetSpec],
    labels: dict[str, str],
    fingerprint: dict[str, Any],
    *,
    duration: float | None,
    suite: str,
) -> dict[str, Any]:
    """What an experiment stores to find its profiles later: this machine's key, and each
    guest configuration's profile key by ``level/set``."""
    return {
        "machine": machine_key(machine_fields(fingerprint)),
        "configurations": {
            f"{s.level}/{s.set or ''}": configuration_key(
                profile_labels(s, labels, duration, suite)
            )
            for s in specs
            if isinstance(s, LevelSpec) and s.is_guest
        },
    }


def between_boot(store: Store, runs: pd.DataFrame) -> Any:  # noqa: ANN401 - stats.compare.BetweenBoot
    """The hook `vmtax compare` hands ``stats.compare.compare`` (``between_boot``): for a
    configuration's probe, what the noise profile of the machine and configuration its
    experiment recorded knows of its boots (:func:`profile_external`), learnt from the other
    experiments of the profile (never from this one), or None. A side measured in one boot
    takes its between-boot variance; a side of two boots or more pools its own variance of a
    boot mean with the profile's. None in place of the hook when no profile is stored."""
    rows = store.noise.rows()
    if not rows:
        return None
    profiles, _ = _parsed(rows)
    by_key = {(p.machine, p.configuration, p.probe): p for p in profiles}
    keys: dict[int, dict[str, Any]] = {}
    for exp_id in sorted({int(x) for x in runs["experiment_id"].unique()}):
        plan = store.experiment(exp_id).get("plan") or {}
        stored = (plan.get("options") or {}).get("noise")
        keys[exp_id] = stored if isinstance(stored, dict) else {}

    def lookup(probe: str, group: pd.DataFrame) -> ExternalBetween | None:
        first = group.iloc[0]
        stored = keys.get(int(first["experiment_id"])) or {}
        set_label = (first.get("labels") or {}).get("set") or ""
        config = (stored.get("configurations") or {}).get(f"{first['level']}/{set_label}")
        found = by_key.get((str(stored.get("machine")), str(config), probe))
        if found is None:
            return None
        comps = found.components.without(int(first["experiment_id"]))
        if comps is None:
            return None
        return profile_external(comps, f"noise profile {config} ({comps.boots} boots)")

    return lookup


def profile_external(comps: Components, where: str) -> ExternalBetween | None:
    """A profile's components as ``stats.boots.ExternalBetween``: the between-boot variance
    with the Satterthwaite degrees of freedom of that estimate (NaN when no boot effect is
    detected: one boot then has nothing to take), and the within-boot variance and the mean
    square of boot means, ``Σ a_i MSB_i`` with ``a_i = w_i / n0_i``, which estimates the
    variance of one boot mean of ``1 / Σ a_i`` runs, with their degrees of freedom: from them
    ``ExternalBetween.boot_mean(m)`` is ``Components.boot_mean(m)``. None when the profile
    has no within-boot degrees of freedom."""
    if not comps.df_within > 0:
        return None
    total = sum(s.df_between for s in comps.sources)
    inverse_runs = sum(s.df_between / total / s.n0 for s in comps.sources)  # Σ a_i
    return ExternalBetween(
        comps.between,
        comps.between_dof(),
        where,
        within=comps.within,
        within_dof=float(comps.df_within),
        boot_variance=comps.between_raw + inverse_runs * comps.within,
        boot_dof=comps.df_between,
        boot_runs=1.0 / inverse_runs,
    )

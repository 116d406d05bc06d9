"""The nested-cost model: the cost of an exit-heavy operation at nesting depth d.

Depth 1 is "the VM" (a guest of the hypervisor that owns the hardware virtualization
support), depth 2 "the nested VM", and so on. docs/model.md derives the equations:

    C_1(k) = a_k                                  one single-level exit of class k
    C_2(k) = a_k + m_k * h                        + the m_k exits the guest hypervisor's
                                                    handling causes, each costing h
    C_d(k) = a_k + m_k * H_{d-1},   H_1 = h,   H_j = h + m_h * H_{j-1}
           = a_k + D_k * S_{d-1},   D_k = C_2(k) - C_1(k),   S_j = 1 + m_h + ... + m_h^(j-1)

Two measured levels identify a_k and D_k = m_k * h for each class, but not m_k and h apart,
and not m_h (the multiplication of the guest hypervisor's own exits), which deeper levels
need. With exit profiles they are measured: m_h is the null exit's (cpuid's) measured
multiplication, and the depth-2 cost is predicted from the exits counted at the
hypervisor of the VM level and their handling times:

    C_2(k) = a_k + (N_2k - N_1k) * e + T_2k

(N: exits per iteration, T: handling time per iteration, e: the round trip of one exit
outside its handler, e = (a_null - T_1null) / N_1null). Without profiles h is assumed to be
one null exit, h = a_null, so m_k = D_k / a_null, and m_h is the mean of m_k over the
classes (the bootstrap resamples the classes too).

DVH what-if: a class whose exits L0 handles directly (virtual timer, IPI, idle,
passthrough) costs a_k at every depth; the others are unchanged.

Uncertainty: numpy resampling of run means (runs are the independent unit), each level and
probe independently, plus, for a prediction interval, one future run's relative spread (the
coefficient of variation of the runs at the level the prediction extends).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.model.mechanisms import NULL, dvh_direct, mechanism

CONFIDENCE = 0.95
PREDICTION_COLUMNS = [
    "benchmark", "level", "dvh", "predicted", "low", "high", "unit",
    "measured", "error_pct", "basis", "kind",
]  # fmt: skip
#: ``kind`` of a row: a prediction uses no data from the level it predicts; a decomposition
#: (depth 2 from that level's own exit profile) explains a measured level by its exits.
PREDICTION, DECOMPOSITION = "prediction", "decomposition"
PARAM_COLUMNS = ["benchmark", "parameter", "estimate", "low", "high", "unit", "basis"]


@dataclass
class Series:
    """One benchmark's calibration data, in one unit.

    ``vm`` and ``nested`` are run-level values (each run's mean; a single published figure
    is an array of one). ``measured`` maps deeper depths (3, 4, ...) to their run means:
    they are only compared with, never fitted. A profile is an array of shape (runs, 2):
    per run, the exits per iteration and the handling time per iteration (in ``unit``)
    recorded at the hypervisor of the VM level.
    """

    benchmark: str
    unit: str
    vm: np.ndarray
    nested: np.ndarray
    measured: dict[int, np.ndarray] = field(default_factory=dict)
    vm_profile: np.ndarray | None = None
    nested_profile: np.ndarray | None = None
    #: Without a nested profile: the exits per nested operation the user assumes the VM's
    #: hypervisor sees (e.g. a hand count), each costing one null exit (assumption A).
    assumed_exits: float | None = None
    #: The nested VM with DVH, measured or published (run values): calibrates x_k, the extra
    #: cost of an exit L0 handles directly when it comes from a nested guest.
    dvh_nested: np.ndarray | None = None

    @property
    def mechanism(self) -> str:
        return mechanism(self.benchmark)


@dataclass
class Fit:
    """Calibrated parameters and predictions; ``level`` is the nesting depth plus ``offset``."""

    params: pd.DataFrame
    predictions: pd.DataFrame
    notes: list[str]


def fit(
    series: list[Series],
    *,
    depths: tuple[int, ...] = (3, 4),
    offset: int = 0,
    resamples: int = 4000,
    seed: int = 0,
) -> Fit:
    """Calibrate on depth 1 and 2 of every series and predict ``depths`` (and depth 2 from
    the exit profile, where there is one), each with and without DVH."""
    if not series:
        raise UsageError("no benchmark to model")
    for s in series:
        for name, values in (("VM", s.vm), ("nested", s.nested)):
            if np.asarray(values).size == 0:
                raise UsageError(
                    f"{s.benchmark}: calibration needs two levels (the VM and the nested VM); "
                    f"the {name} level has no runs"
                )
    by_mech = {s.mechanism: s for s in series}
    if len(by_mech) != len(series):
        raise UsageError("two series have the same exit mechanism; model one configuration")
    rng = np.random.default_rng(seed)
    point = _evaluate(series, _draws(series, None, rng), None)
    reps = _evaluate(series, _draws(series, resamples, rng), rng)
    notes = list(point.pop("notes"))
    reps.pop("notes")
    params = _params(series, point, reps)
    rows = []
    for s in series:
        direct = dvh_direct(s.benchmark)
        cv_vm, cv_nested = _cv(s.vm), _cv(s.nested)
        wanted: list[tuple[int, bool, str, float]] = []
        if f"c2pred:{s.benchmark}" in point:
            wanted.append((2, False, "c2pred", cv_nested))
        wanted.append((2, True, "dvh2", cv_vm if direct else cv_nested))
        for d in depths:
            wanted.append((d, False, f"c{d}", cv_nested))
            wanted.append((d, True, f"dvh{d}", cv_vm if direct else cv_nested))
        for depth, dvh, key, cv in wanted:
            est = float(point[f"{key}:{s.benchmark}"][0])
            if not est > 0:
                # A time is never negative: say why the model cannot give one, instead.
                notes.append(_no_positive_time(s, depth + offset, dvh, key, est, point))
                continue
            rep = reps[f"{key}:{s.benchmark}"]
            # One future run's spread, lognormal with the runs' coefficient of variation:
            # costs are positive and a loaded machine's run means are right-skewed.
            sigma = np.sqrt(np.log1p(cv * cv))
            noisy = rep * np.exp(sigma * rng.standard_normal(rep.shape) - sigma * sigma / 2)
            low, high = _interval(noisy)
            measured = _measured(s, depth) if not dvh else None
            rows.append(
                {
                    "benchmark": s.benchmark,
                    "level": depth + offset,
                    "dvh": dvh,
                    "predicted": est,
                    "low": low,
                    "high": high,
                    "unit": s.unit,
                    "measured": measured,
                    "error_pct": (100.0 * (est - measured) / measured if measured else None),
                    "basis": _basis(point, s, depth, dvh, direct),
                    "kind": DECOMPOSITION if key == "c2pred" else PREDICTION,
                }
            )
    predictions = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
    return Fit(params=params, predictions=predictions, notes=notes)


def _no_positive_time(s: Series, level: int, dvh: bool, key: str, est: float, point: dict) -> str:
    """One line: why the model's value for ``s`` at ``level`` is not a positive time."""
    where = f"{s.benchmark} at L{level}{'+DVH' if dvh else ''}"
    if key == "c2pred":
        e = float(point["e"][0]) if "e" in point else float("nan")
        why = (
            f"the exit round trip e = {e:.3g} {s.unit} is not positive: the VM level's exit "
            "profile says handling takes longer than the whole exit"
            if not e > 0
            else "the nested level's exits cost less than the VM level's"
        )
    else:
        d = float(point[f"D:{s.benchmark}"][0])
        why = (
            f"the nested level is not slower than the VM level (D = {d:.3g} {s.unit}), so "
            "there is no nesting increment to multiply"
            if not d > 0
            else f"m_h = {float(point['m_h'][0]):.3g} gives no positive sum"
        )
    return f"{where}: no prediction ({est:.3g} {s.unit} is not a time): {why}"


# -- resampling -----------------------------------------------------------------------------


def _mean_draw(values: np.ndarray, resamples: int | None, rng: np.random.Generator) -> np.ndarray:
    """The mean of ``values`` (axis 0), or ``resamples`` means of rows drawn with replacement.

    Rows (runs) are drawn jointly, so a profile's two columns stay paired by run.
    """
    x = np.asarray(values, dtype=np.float64)
    if resamples is None or len(x) < 2:
        return np.broadcast_to(x.mean(axis=0), (resamples or 1, *x.shape[1:])).copy()
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    return x[idx].mean(axis=1)


def _draws(series: list[Series], resamples: int | None, rng: np.random.Generator) -> dict:
    out: dict[str, np.ndarray] = {}
    for s in series:
        out[f"vm:{s.benchmark}"] = _mean_draw(s.vm, resamples, rng)
        out[f"nested:{s.benchmark}"] = _mean_draw(s.nested, resamples, rng)
        if s.dvh_nested is not None and np.asarray(s.dvh_nested).size:
            out[f"dvh_nested:{s.benchmark}"] = _mean_draw(s.dvh_nested, resamples, rng)
        for name in ("vm_profile", "nested_profile"):
            prof = getattr(s, name)
            if prof is not None and len(prof):
                out[f"{name}:{s.benchmark}"] = _mean_draw(prof, resamples, rng)
    return out


def _cv(values: np.ndarray) -> float:
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 or x.mean() == 0:
        return 0.0
    return float(x.std(ddof=1) / abs(x.mean()))


def _interval(values: np.ndarray) -> tuple[float, float]:
    tail = 100.0 * (1.0 - CONFIDENCE) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


# -- the equations --------------------------------------------------------------------------


def sum_of_powers(m: np.ndarray, terms: int) -> np.ndarray:
    """S_j = 1 + m + ... + m^(j-1) (S_0 = 0): the cost of one guest-hypervisor exit at depth j,
    in units of its single-level cost."""
    total = np.zeros_like(m, dtype=np.float64)
    power = np.ones_like(m, dtype=np.float64)
    for _ in range(terms):
        total = total + power
        power = power * m
    return total


def _evaluate(series: list[Series], draws: dict, rng: np.random.Generator | None) -> dict:
    """Every parameter and prediction, vectorised over the draws (shape (B,)). With ``rng``
    the classes that m_h averages over are resampled too (the point estimate passes None)."""
    out: dict = {"notes": []}
    notes = out["notes"]
    null = next((s for s in series if s.mechanism == NULL), None)
    a = {s.benchmark: draws[f"vm:{s.benchmark}"] for s in series}
    c2 = {s.benchmark: draws[f"nested:{s.benchmark}"] for s in series}
    delta = {k: c2[k] - a[k] for k in a}

    def profile(s: Series, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        p = draws.get(f"{name}:{s.benchmark}")
        return (p[:, 0], p[:, 1]) if p is not None else None

    # e: one exit's round trip outside its handler.
    e = None
    if null is not None:
        vm_prof = profile(null, "vm_profile")
        if vm_prof is not None and np.isfinite(vm_prof[1]).all():
            e = (a[null.benchmark] - vm_prof[1]) / vm_prof[0]
            out["basis:e"] = "VM-level profile of the null exit"
        else:
            e = a[null.benchmark]
            out["basis:e"] = "assumed: the null exit's whole cost (no VM-level profile)"
        out["e"] = e
    # Depth-2 prediction from the nested level's exit profile.
    for s in series:
        nested_prof = profile(s, "nested_profile")
        exits = s.assumed_exits
        assumed = nested_prof is None and exits is not None
        if assumed and e is not None and exits is not None:
            # No handling times: each exit is one null exit's whole cost, e = a_null.
            n_assumed = np.full_like(e, float(exits))
            nested_prof = (n_assumed, np.zeros_like(e))
        if nested_prof is None:
            continue
        if not np.isfinite(nested_prof[1]).all():
            notes.append(f"{s.benchmark}: its exit profile has no handling times")
            continue
        if e is None:
            notes.append(
                f"{s.benchmark}: its exit profile is not used: the null exit (cpuid) is needed "
                "for the cost of one exit"
            )
            continue
        vm_prof = profile(s, "vm_profile")
        n1 = vm_prof[0] if vm_prof is not None else np.ones_like(nested_prof[0])
        out[f"m:{s.benchmark}"] = nested_prof[0] - n1
        out[f"basis:m:{s.benchmark}"] = (
            "assumed: --exits-per-exit" if assumed else "measured: exit profile"
        )
        out[f"basis:c2:{s.benchmark}"] = "assumed exits" if assumed else "exit profile"
        out[f"c2pred:{s.benchmark}"] = a[s.benchmark] + (nested_prof[0] - n1) * e + nested_prof[1]
    # m_h: the multiplication of one of the guest hypervisor's own exits.
    if null is not None and f"m:{null.benchmark}" in out:
        m_h = out[f"m:{null.benchmark}"]
        out["basis:m_h"] = (
            "assumed: the null exit's given exits per exit"
            if null.assumed_exits is not None and null.nested_profile is None
            else "measured: the null exit's multiplication in its exit profile"
        )
    elif null is not None:
        usable = [s for s in series if float(np.mean(delta[s.benchmark])) > 0]
        for s in series:
            if s not in usable:
                notes.append(
                    f"{s.benchmark}: the nested level is not slower than the VM level, so it "
                    "shows no exit multiplication; it is left out of m_h"
                )
        if not usable:
            raise UsageError(
                "no benchmark is slower at the nested level than at the VM level: there is no "
                "exit multiplication to model"
            )
        per_class = np.stack(
            [delta[s.benchmark] / a[null.benchmark] for s in usable], axis=-1
        )  # (B, K)
        for s, col in zip(usable, per_class.T, strict=True):
            out.setdefault(f"m:{s.benchmark}", col)
            out.setdefault(
                f"basis:m:{s.benchmark}", "assumed: each caused exit costs one null exit"
            )
        if rng is None:
            pick = np.broadcast_to(np.arange(len(usable)), per_class.shape)
        else:
            pick = rng.integers(0, len(usable), size=per_class.shape)
        m_h = np.take_along_axis(per_class, pick, axis=1).mean(axis=1)
        out["basis:m_h"] = (
            "assumed: a guest-hypervisor exit multiplies like the mean class "
            "(each caused exit costs one null exit)"
        )
    else:
        raise UsageError(
            "the model needs the null exit (cpuid / Hypercall) to separate the multiplication "
            "from the cost of each exit"
        )
    out["m_h"] = m_h
    for s in series:
        k = s.benchmark
        out[f"a:{k}"], out[f"D:{k}"] = a[k], delta[k]
        direct = dvh_direct(k)
        # DVH at depth 2 from structure alone: a_k, a lower bound (docs/model.md: no term of
        # the VM and nested-VM columns gives the nested exit's extra cost at L0).
        out[f"dvh2:{k}"] = a[k] if direct else c2[k]
        x = draws.get(f"dvh_nested:{k}")
        if direct and x is not None:
            out[f"x:{k}"] = x - a[k]
        for d in range(3, 9):
            c = a[k] + delta[k] * sum_of_powers(m_h, d - 1)
            out[f"c{d}:{k}"] = c
            if not direct:
                out[f"dvh{d}:{k}"] = c
            elif x is not None:
                # Each guest hypervisor between L0 and the guest adds its own state to what
                # L0 resolves in software for a direct exit: one x_k per level below.
                out[f"dvh{d}:{k}"] = a[k] + (d - 1) * out[f"x:{k}"]
            else:
                out[f"dvh{d}:{k}"] = a[k]
    return out


# -- tables ---------------------------------------------------------------------------------


def _measured(s: Series, depth: int) -> float | None:
    values = s.nested if depth == 2 else s.measured.get(depth)
    if values is None or np.asarray(values).size == 0:
        return None
    return float(np.mean(values))


def _basis(point: dict, s: Series, depth: int, dvh: bool, direct: bool) -> str:
    if dvh and direct and depth > 2 and f"x:{s.benchmark}" in point:
        return f"DVH: a_k + {depth - 1}*x_k, x_k calibrated on the nested VM + DVH"
    if dvh and direct:
        return "DVH lower bound: a_k (handled by L0 alone; a nested exit's extra cost unknown)"
    if dvh and depth == 2:
        return "DVH does not apply: measured nested"
    if depth == 2:
        return f"{point[f'basis:c2:{s.benchmark}']}: a_k + (N2-N1)*e + T2"
    how = "measured" if point["basis:m_h"].startswith("measured") else "assumed"
    return f"a_k + D_k*S_{depth - 1}(m_h), m_h {how}"


def _params(series: list[Series], point: dict, reps: dict) -> pd.DataFrame:
    rows = []

    def add(bench: str, name: str, key: str, unit: str, basis: str) -> None:
        if key not in point:
            return
        low, high = _interval(reps[key])
        rows.append([bench, name, float(point[key][0]), low, high, unit, basis])

    unit = series[0].unit
    for s in series:
        add(s.benchmark, "a (single-level cost)", f"a:{s.benchmark}", s.unit, "measured VM")
        add(s.benchmark, "D = m*h (nesting increment)", f"D:{s.benchmark}", s.unit, "nested - VM")
        add(
            s.benchmark,
            "x (extra cost of a direct nested exit)",
            f"x:{s.benchmark}",
            s.unit,
            "nested VM + DVH - VM",
        )
        add(
            s.benchmark,
            "m (exits caused per forwarded exit)",
            f"m:{s.benchmark}",
            "exits",
            point.get(f"basis:m:{s.benchmark}", ""),
        )
    add("all", "e (exit round trip)", "e", unit, point.get("basis:e", ""))
    add("all", "m_h (guest-hypervisor exit multiplication)", "m_h", "exits", point["basis:m_h"])
    return pd.DataFrame(rows, columns=PARAM_COLUMNS)

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
classes.

DVH what-if: a class whose exits L0 serves directly (virtual timer, IPI, idle, passthrough)
costs a_k + x_k at every depth from 2 on (x_k from a nested VM + DVH level; without one, the
lower bound a_k); the others are unchanged.

Uncertainty (vmtax.model.intervals): the delta method over the independent groups of runs
(runs are the unit), t quantiles at Welch–Satterthwaite's degrees of freedom; a prediction's
interval is on the log scale and adds one future run's spread at the level it extends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.model.intervals import future_run, group_means, interval, linearise
from vmtax.model.mechanisms import NULL, dvh_direct, mechanism

PREDICTION_COLUMNS = [
    "benchmark", "level", "dvh", "predicted", "low", "high", "unit",
    "measured", "error_pct", "basis", "kind", "scope", "log_ratio",
    "baseline", "baseline_error_pct", "baseline_log_ratio", "baseline_basis",
]  # fmt: skip
#: ``kind`` of a row: a prediction uses no data from the level it predicts; a decomposition
#: (depth 2 from that level's own exit profile) explains a measured level by its exits.
PREDICTION, DECOMPOSITION = "prediction", "decomposition"
#: ``scope`` of a row: fitted (the level's own data went in: a decomposition), held out (the
#: level was measured and none of it went in: scored against it) or extrapolated (a level or
#: configuration beyond any measured for that benchmark: nothing to score it against).
FITTED, HELD_OUT, EXTRAPOLATED = "fitted", "held out", "extrapolated"
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
    #: Deeper depths (3, 4, ...) measured with DVH (run values): only compared with.
    measured_dvh: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def mechanism(self) -> str:
        return mechanism(self.benchmark)


@dataclass
class Fit:
    """Calibrated parameters and predictions; ``level`` is the nesting depth plus ``offset``."""

    params: pd.DataFrame
    predictions: pd.DataFrame
    notes: list[str]


def fit(series: list[Series], *, depths: tuple[int, ...] = (3, 4), offset: int = 0) -> Fit:
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
    groups = runs_of(series)
    point = _evaluate(series, group_means(groups))
    notes = list(point.pop("notes"))
    spans = intervals(series, groups, depths)
    published = all(g.shape[1] == 1 for g in groups.values())
    if published:
        # A published point: low = high = the estimate, as the CLI shows a point with no spread.
        spans = {key: (est, est, est) for key, (est, _, _) in spans.items()}
        notes.append(_one_figure_a_cell(series, point))
    params = _params(series, point, spans)
    rows = []
    for s in series:
        direct = dvh_direct(s.benchmark)
        wanted: list[tuple[int, bool, str]] = []
        if f"c2pred:{s.benchmark}" in point:
            wanted.append((2, False, "c2pred"))
        elif f"loo2:{s.benchmark}" in point:
            # Without its own profile, the nested level is predicted with its class left out
            # (with profiles, `--out-of-sample` is that prediction).
            wanted.append((2, False, "loo2"))
        wanted.append((2, True, "dvh2"))
        for d in depths:
            wanted.append((d, False, f"c{d}"))
            wanted.append((d, True, f"dvh{d}"))
        for depth, dvh, key in wanted:
            est = float(point[f"{key}:{s.benchmark}"][0])
            if not est > 0:
                # A time is never negative: say why the model cannot give one, instead.
                notes.append(_no_positive_time(s, depth + offset, dvh, key, est, point))
                continue
            _, low, high = spans[f"{key}:{s.benchmark}"]
            measured = _measured(s, depth, dvh)
            base = point.get(f"base_{key}:{s.benchmark}")
            base_value = float(base[0]) if base is not None and float(base[0]) > 0 else None
            rows.append(
                {
                    "benchmark": s.benchmark,
                    "level": depth + offset,
                    "dvh": dvh,
                    "predicted": est,
                    "low": float(low[0]),
                    "high": float(high[0]),
                    "unit": s.unit,
                    "measured": measured,
                    "error_pct": error_pct(est, measured),
                    "basis": (LOO_BASIS if key == "loo2" else _basis(point, s, depth, dvh, direct)),
                    "kind": DECOMPOSITION if key == "c2pred" else PREDICTION,
                    "scope": _scope(s, depth, dvh, key),
                    "log_ratio": abs_log_ratio(est, measured),
                    "baseline": base_value,
                    "baseline_error_pct": error_pct(base_value, measured),
                    "baseline_log_ratio": abs_log_ratio(base_value, measured),
                    "baseline_basis": _baseline_basis(key, direct) if base_value else "",
                }
            )
    predictions = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
    return Fit(params=params, predictions=predictions, notes=notes)


def _one_figure_a_cell(series: list[Series], point: dict) -> str:
    ms = [float(point[f"m:{s.benchmark}"][0]) for s in series if f"m:{s.benchmark}" in point]
    spread = f"; m_k ranges {min(ms):.3g} to {max(ms):.3g} across the classes" if ms else ""
    return (
        "no interval: each level is one figure (a published cell or a single run), with no "
        f"run-to-run spread to estimate one from{spread} (m_h is their mean)"
    )


#: Parameters get a confidence interval on their own scale (D and x may be negative).
PARAMS = ("a", "D", "x", "m", "e", "m_h")


def intervals(
    series: list[Series], groups: dict[str, np.ndarray], depths: tuple[int, ...] = (3, 4)
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(estimate, low, high) of every parameter and prediction, each (trials,), from
    ``groups`` (``runs_of``'s names; (trials, runs, k) arrays, so a coverage simulation runs
    this very code on thousands of trials at once). Parameters: confidence intervals;
    predictions: prediction intervals of one future run (docs/model.md, Uncertainty)."""
    lin = linearise(lambda means: _evaluate(series, means), groups)
    out = {}
    for key in lin.estimate:
        name = key.split(":")[0]
        if name in PARAMS:
            out[key] = interval(lin, key)
            continue
        level = _future_level(series, key)
        if level is None:
            continue
        out[key] = interval(lin, key, log=True, future=future_run(level, groups))
    return out


def _future_level(series: list[Series], key: str) -> str | None:
    """The group whose runs a future run of prediction ``key`` is like: the nested level,
    or for a DVH-direct class the nested VM + DVH (the VM for the lower bound)."""
    name, _, bench = key.partition(":")
    if name == "loo2" and bench:
        return f"nested:{bench}"
    if not bench or not name.startswith(("c", "dvh")):
        return None
    s = next(x for x in series if x.benchmark == bench)
    if name.startswith("dvh") and dvh_direct(bench):
        has_x = s.dvh_nested is not None and np.asarray(s.dvh_nested).size
        if has_x and name != "dvh2":
            return f"dvh_nested:{bench}"
        return f"vm:{bench}"
    return f"nested:{bench}"


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


# -- the groups of runs ----------------------------------------------------------------------


def runs_of(series: list[Series]) -> dict[str, np.ndarray]:
    """The independent groups of runs the model is computed from, each (1, runs, k): a level's
    run means, or a profile's (exits, handling) per run (paired by run)."""
    out: dict[str, np.ndarray] = {}

    def add(name: str, values: np.ndarray | None) -> None:
        if values is None or np.asarray(values).size == 0:
            return
        x = np.asarray(values, dtype=np.float64)
        out[name] = (x[:, None] if x.ndim == 1 else x)[None]

    for s in series:
        add(f"vm:{s.benchmark}", s.vm)
        add(f"nested:{s.benchmark}", s.nested)
        add(f"dvh_nested:{s.benchmark}", s.dvh_nested)
        add(f"vm_profile:{s.benchmark}", s.vm_profile)
        add(f"nested_profile:{s.benchmark}", s.nested_profile)
    return out


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


def _evaluate(series: list[Series], draws: dict) -> dict:
    """Every parameter and prediction from the groups' means, vectorised over trials (shape
    (T,); a profile's (T, 2))."""
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
        m_h = per_class.mean(axis=1)
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
                # Recursive DVH (study C, 3.5): the guest hypervisors pass the virtual
                # hardware's configuration down before the run; during it L0 alone serves the
                # deepest VM's exit, on state composed once. No level adds to it: a_k + x_k.
                out[f"dvh{d}:{k}"] = a[k] + out[f"x:{k}"]
            else:
                out[f"dvh{d}:{k}"] = a[k]
    _baselines(series, out, a, c2, draws, null)
    return out


def _baselines(
    series: list[Series], out: dict, a: dict, c2: dict, draws: dict, null: Series | None
) -> None:
    """The constant-ratio rule beside every prediction (``base_<key>``), and the nested level
    of each class from its VM level with that class left out (``loo2``, with its ratio
    baseline): what the model has to beat.

    The rule: a level is the level below it times the ratio observed one level down, on the
    same probe where its own two levels calibrate it (L3 + DVH = L2 + DVH × (L2 + DVH) / L1),
    else on the calibration probe: the null exit for the nesting (study C's Hypercall: L3 =
    L2 × L2/L1 of the Hypercall), the other classes (geometric mean) for a left-out class.
    """
    if null is not None:
        r = c2[null.benchmark] / a[null.benchmark]
        for s in series:
            k = s.benchmark
            direct = dvh_direct(k)
            x = draws.get(f"dvh_nested:{k}")
            if not direct:
                out[f"base_dvh2:{k}"] = c2[k]
            for d in range(3, 9):
                out[f"base_c{d}:{k}"] = c2[k] * r ** (d - 2)
                if not direct:
                    out[f"base_dvh{d}:{k}"] = out[f"base_c{d}:{k}"]
                elif x is not None:
                    out[f"base_dvh{d}:{k}"] = x * (x / a[k]) ** (d - 2)
    if len(series) < 3:
        return  # a class left out needs two others to take a mean of
    for s in series:
        k = s.benchmark
        others = [j.benchmark for j in series if j.benchmark != k]
        out[f"loo2:{k}"] = a[k] + sum(c2[j] - a[j] for j in others) / len(others)
        logs = sum(np.log(c2[j] / a[j]) for j in others) / len(others)
        out[f"base_loo2:{k}"] = a[k] * np.exp(logs)


# -- tables ---------------------------------------------------------------------------------


def _measured(s: Series, depth: int, dvh: bool = False) -> float | None:
    if dvh:
        values = s.dvh_nested if depth == 2 else s.measured_dvh.get(depth)
    else:
        values = s.nested if depth == 2 else s.measured.get(depth)
    if values is None or np.asarray(values).size == 0:
        return None
    return float(np.mean(values))


def _scope(s: Series, depth: int, dvh: bool, key: str) -> str:
    """fitted, held out or extrapolated (see ``FITTED``)."""
    if key == "c2pred":
        return FITTED
    if _measured(s, depth, dvh) is not None:
        return HELD_OUT
    return EXTRAPOLATED


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """100 · (predicted − measured) / measured, or None without both."""
    if predicted is None or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


def abs_log_ratio(predicted: float | None, measured: float | None) -> float | None:
    """|ln(predicted / measured)|: a symmetric error (×2 and ÷2 score alike), or None."""
    if predicted is None or measured is None or not predicted > 0 or not measured > 0:
        return None
    return float(abs(np.log(predicted / measured)))


#: The basis of a row predicting the nested level from the VM level, leaving its class out.
LOO_BASIS = "leave one out: a_k + mean D_j of the other classes (nesting adds alike)"


def _baseline_basis(key: str, direct: bool) -> str:
    """What the constant-ratio baseline of a row multiplied (docs/model.md, The baseline)."""
    if key == "loo2":
        return "ratio: a_k × geometric mean of the other classes' nested/VM"
    if key.startswith("dvh") and direct:
        return "ratio: the nested+DVH level × its own nested+DVH/VM, per level"
    return "ratio: the nested level × the null exit's nested/VM, per level"


def _basis(point: dict, s: Series, depth: int, dvh: bool, direct: bool) -> str:
    if dvh and direct and depth > 2 and f"x:{s.benchmark}" in point:
        return "DVH (served by L0 at any depth): a_k + x_k, x_k from the nested VM + DVH"
    if dvh and direct:
        return "DVH lower bound: a_k (handled by L0 alone; a nested exit's extra cost unknown)"
    if dvh and depth == 2:
        return "DVH does not apply: measured nested"
    if depth == 2:
        return f"{point[f'basis:c2:{s.benchmark}']}: a_k + (N2-N1)*e + T2"
    how = "measured" if point["basis:m_h"].startswith("measured") else "assumed"
    return f"a_k + D_k*S_{depth - 1}(m_h), m_h {how}"


def _params(series: list[Series], point: dict, spans: dict) -> pd.DataFrame:
    rows = []

    def add(bench: str, name: str, key: str, unit: str, basis: str) -> None:
        if key not in point:
            return
        _, low, high = spans[key]
        rows.append([bench, name, float(point[key][0]), float(low[0]), float(high[0]), unit, basis])

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

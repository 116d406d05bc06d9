"""Compare configurations against a baseline: overhead with a calibrated CI, the study-A columns,
a p-value adjusted across the whole family of one command, and a verdict.

For each probe, metric and configuration:

- ``mean``, ``stderr`` and ``stderr_pct`` over the run values (runs are the unit);
- ``delta_prev_pct``: study A's ΔL(n−1), the relative change from the previous level of the
  same chain (configurations whose labels agree on every key they share, ordered L0 < L1 <
  L2 < L3, across experiments);
- ``overhead`` against the baseline, direction-aware (>1 = slower), with a 95% CI on the log of
  the ratio of means (see :mod:`vmtax.stats.intervals`, whose coverage is simulated in the
  tests), positive by construction. Runs are the unit inside a boot, boots above that: a side
  measured in two boots or more enters as its boot means (Behrens–Fisher quantile), a side
  with one boot as its runs (Welch's t); with one boot on both sides the interval holds for
  that boot only, and the row says so;
- ``p_value`` from a two-sample test on the same units: on runs, the chosen test (permutation
  by default); with a boot-level side, the interval's own dual, whatever the chosen test
  (Welch's t on the log ratio of boot means against boot means, Behrens–Fisher against one
  boot's runs, which do not share a distribution with boot means under the null), so the
  verdict and the interval agree; and ``p_adjusted`` across every non-baseline row of the
  command (Holm by default);
- ``boots``, ``between_share`` and ``runs_per_boot``: the configuration's boots, the share of
  its run-to-run variance that lies between boots, and the runs per boot Kalibera and Jones'
  formula picks from them (:mod:`vmtax.stats.boots`);
- ``verdict``: ``slower`` / ``faster`` only when ``p_adjusted < alpha`` AND the whole CI lies
  outside the noise band ``[1 - noise, 1 + noise]``; ``~`` otherwise; ``baseline`` for the
  baseline's own row; ``imprecise`` instead of ``~`` when adaptive sampling left either side
  short of its precision target (``imprecise`` pairs, see vmtax.sampling.outcome).

One ``geomean`` row per configuration and metric summarises the probes: the geometric mean of
the overheads, with a CI that takes the rounds (or, with two boots or more, the boots) the
probes share as its unit (:func:`vmtax.stats.intervals.geomean_clustered`). It is not a test, so
its p-values are empty and its verdict depends on the CI and the noise band alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.stats import boots, dist, intervals, significance
from vmtax.stats.compare_options import BOOT_COST_S as BOOT_COST_S
from vmtax.stats.compare_options import CompareOptions as CompareOptions
from vmtax.store.select import label_value, mask

ALPHA = 0.05
CONFIDENCE = 0.95
MIN_RUNS = 5
SCHEMA = "vmtax.compare/1"
ONE_BOOT = boots.ONE_BOOT

# metric -> (runs column, unit override, better override); None = take the probe's own.
METRICS: dict[str, tuple[str, str | None, str | None]] = {
    "mean": ("mean", None, None),
    "median": ("median", None, None),
    "p95": ("p95", None, None),
    "p99": ("p99", None, None),
    "min": ("min", None, None),
    "max": ("max", None, None),
    "throughput": ("throughput", None, "higher"),
    "ops_per_sec": ("ops_per_sec", "ops/s", "higher"),
    "wall_s": ("wall_s", "s", "lower"),
}

#: The variance components' columns beside the between-boot share, with their intervals.
_COMPONENT_COLUMNS = (
    "share_low",
    "share_high",
    "between_var",
    "between_low",
    "between_high",
    "within_var",
    "within_low",
    "within_high",
)

COLUMNS = [
    "probe",
    "metric",
    "unit",
    "better",
    "config",
    "level",
    "is_baseline",
    "n_runs",
    "boots",
    "between_share",
    *_COMPONENT_COLUMNS,
    "runs_per_boot",
    "mean",
    "stderr",
    "stderr_pct",
    "delta_prev_pct",
    "overhead",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "verdict",
    "warnings",
]


@dataclass
class Comparison:
    """The result of :func:`compare`: one row per (probe, metric, config) plus geomean rows."""

    rows: pd.DataFrame
    baseline: str
    test: str
    adjust: str
    noise: float
    resamples: int
    seed: int
    metrics: list[str]
    alpha: float = ALPHA
    confidence: float = CONFIDENCE
    warnings: list[str] = field(default_factory=list)
    #: The label a pooled comparison compares (``CompareOptions.by``), or None.
    by: str | None = None

    @property
    def family_size(self) -> int:
        tested = self.rows[(self.rows["probe"] != "geomean") & ~self.rows["is_baseline"]]
        return int(np.isfinite(tested["p_value"].astype(float)).sum())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the structure is documented in docs/compare-json.md."""
        rows = []
        for rec in self.rows.to_dict(orient="records"):
            out = {k: _json_value(rec[k]) for k in COLUMNS if k != "warnings"}
            if out["runs_per_boot"] is not None:
                out["runs_per_boot"] = int(out["runs_per_boot"])
            out["warnings"] = [w for w in str(rec["warnings"] or "").split("; ") if w]
            rows.append(out)
        return {
            "schema": SCHEMA,
            "baseline": self.baseline,
            "metrics": list(self.metrics),
            "test": self.test,
            "adjust": self.adjust,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "noise": self.noise,
            "resamples": self.resamples,
            "seed": self.seed,
            "family_size": self.family_size,
            "by": self.by,
            "rows": rows,
            "warnings": list(self.warnings),
        }


def _json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def level_number(level: Any) -> float:
    """``L2`` -> 2; anything else -> NaN (such configurations stay out of ΔL chains)."""
    match = re.fullmatch(r"[lL](\d+)", str(level or ""))
    return float(match.group(1)) if match else math.nan


def _metrics(metric: str | Sequence[str]) -> list[str]:
    names = [metric] if isinstance(metric, str) else list(metric)
    out: list[str] = []
    for name in (part.strip().lower() for n in names for part in str(n).split(",")):
        if not name:
            continue
        name = "mean" if name == "auto" else name
        if name not in METRICS:
            raise UsageError(f"unknown metric {name!r} (choose from auto, {', '.join(METRICS)})")
        if name not in out:
            out.append(name)
    return out or ["mean"]


def _baseline_mask(runs: pd.DataFrame, baseline: str | pd.Series) -> pd.Series:
    if isinstance(baseline, pd.Series):
        return baseline.reindex(runs.index, fill_value=False).astype(bool)

    return mask(runs, baseline)


def _group_keys(ok: pd.DataFrame) -> pd.Series:
    """The comparison unit: a configuration of one experiment. The display name is the config
    key, prefixed with the experiment id only when the same key occurs in several experiments."""
    exps_per_config = ok.groupby("config")["experiment_id"].nunique()
    clash = ok["config"].map(exps_per_config) > 1
    prefixed = "#" + ok["experiment_id"].astype(str) + " " + ok["config"].astype(str)
    return prefixed.where(clash, ok["config"].astype(str))


def _pooled_by(ok: pd.DataFrame, by: str, notes: list[str]) -> pd.DataFrame:
    """Runs pooled by the value of label ``by`` (an inventory's ``group``): each value is one
    side, and each configuration in it (a host) is a cluster, in the ``boot`` column that
    the boot-level comparison reads, so a side of two hosts or more enters as its host
    means. A host's boots and runs are averaged into its mean: hosts are the unit there."""
    values = [label_value(labels, by) for labels in ok["labels"]]
    has = pd.Series([v is not None for v in values], index=ok.index)
    if not has.any():
        seen = sorted({str(k) for labels in ok["labels"] for k in (labels or {})})
        raise UsageError(
            f"--by {by}: no run has a label {by} (labels here: {', '.join(seen) or 'none'})"
        )
    if not has.all():
        notes.append(f"{int((~has).sum())} runs have no label {by}; left out")
    out = ok[has.to_numpy()].copy()
    out["_key"] = [f"{by}={v}" for v in values if v is not None]
    out["boot"] = "#" + out["experiment_id"].astype(str) + " " + out["config"].astype(str)
    out["_pooled"] = True
    return out


def compare(
    runs: pd.DataFrame,
    baseline: str | pd.Series,
    *,
    metric: str | Sequence[str] = "auto",
    options: CompareOptions | None = None,
    label: str | None = None,
    imprecise: Collection[tuple[int, str]] = (),
    between_boot: BetweenBoot | None = None,
    **settings: Any,
) -> Comparison:
    """Compare every configuration in ``runs`` with the ``baseline`` selector's configuration.

    ``runs`` has the ``Store.runs()`` columns (runs are the unit: raw iterations are not
    needed). ``options`` says how (the defaults when None); a caller without one may give
    its fields as keywords instead (``resamples=2000``), checked the same way.
    ``between_boot(probe, runs)``: what a stored noise profile knows of a configuration's
    boots (``boots.ExternalBetween``), or None: a guest measured in one boot takes its
    between-boot variance and can give a verdict, without it it cannot (docs/statistics.md,
    "One boot a side"); a guest measured in two boots or more pools its variance of a boot
    mean with the profile's unless an F-test rejects the profile, and the row says which
    (docs/statistics.md, "Noise profiles", borrowed strength). Raises
    UsageError when the baseline matches no run or, for one probe, more than one
    configuration.
    """
    if options is None:
        try:
            options = CompareOptions(**settings)
        except TypeError as exc:  # a keyword CompareOptions does not have
            raise UsageError(f"compare: {exc}") from None
    elif settings:
        raise UsageError(f"compare: give options or {', '.join(settings)}, not both")
    test, adjust, noise = options.test, options.adjust, options.noise
    resamples, seed, boot_cost_s = options.resamples, options.seed, options.boot_cost_s
    metrics = _metrics(metric)
    label = label or (baseline if isinstance(baseline, str) else "(mask)")
    ok = runs[runs["status"] == "ok"].copy()
    if ok.empty:
        raise UsageError("no completed runs match the selectors")
    notes: list[str] = []
    if options.by:
        ok = _pooled_by(ok, options.by, notes)
    else:
        ok["_key"] = _group_keys(ok)
    ok["_base"] = _baseline_mask(ok, baseline).to_numpy()
    if not ok["_base"].any():
        raise UsageError(f"baseline {label!r} matches no completed run")

    rows: list[dict[str, Any]] = []
    ratios: dict[int, intervals.RatioInterval] = {}
    sides: dict[int, tuple[boots.Units, boots.Units]] = {}
    for probe, pruns in ok.groupby("probe", sort=True):
        base_keys = list(dict.fromkeys(pruns.loc[pruns["_base"], "_key"]))
        if len(base_keys) > 1:
            raise UsageError(
                f"baseline {label!r} matches {len(base_keys)} configurations for probe "
                f"{probe}: {', '.join(base_keys)}; narrow it (e.g. add exp= or level=)"
            )
        if not base_keys:
            notes.append(f"probe {probe}: the baseline has no runs of it; not compared")
            continue
        base_key = base_keys[0]
        for name in metrics:
            _compare_metric(
                pruns,
                str(probe),
                name,
                base_key,
                test,
                resamples,
                seed,
                rows,
                ratios,
                sides,
                notes,
                boot_cost_s,
                between_boot,
            )

    frame = pd.DataFrame(
        rows,
        columns=[*COLUMNS, "_ratio", "_labels", "_exp", "_n_base", "_n_units", "_unit_name"]
        + ["_floor_test", "_no_verdict"],
    )
    if frame.empty or frame["is_baseline"].all():
        raise UsageError(
            "nothing to compare: no probe has runs in both the baseline and another configuration"
        )
    _chain_deltas(frame)
    tested = ~frame["is_baseline"]
    pvals = frame["p_value"].astype(float).to_numpy()
    pvals_family = np.where(tested, pvals, np.nan)
    frame["p_adjusted"] = significance.adjust(pvals_family, adjust)
    floors = np.array(
        [
            significance.min_pvalue(int(n), int(nb), ft, resamples=resamples) if t else np.nan
            for n, nb, ft, t in zip(
                frame["_n_units"], frame["_n_base"], frame["_floor_test"], tested, strict=True
            )
        ]
    )
    # The same family as p_adjusted: the tested rows with a p-value (NaN is left out, as
    # adjust leaves it out). Baseline rows given p = 1 here once inflated Holm's count and
    # said "cannot reach significance" beside a significant verdict.
    best = significance.best_adjusted(pvals_family, floors, adjust)
    for i in np.flatnonzero(tested.to_numpy()):
        if np.isfinite(best[i]) and best[i] >= ALPHA:
            _warn(
                frame,
                int(i),
                f"cannot reach significance: best possible adjusted p is "
                f"{best[i]:.3g} with {int(frame['_n_units'].loc[i])} vs "
                f"{int(frame['_n_base'].loc[i])} {frame['_unit_name'].loc[i]}",
            )
    frame["verdict"] = [
        "baseline" if b else (why or _verdict(pa, lo, hi, noise))
        for b, pa, lo, hi, why in zip(
            frame["is_baseline"],
            frame["p_adjusted"],
            frame["ci_low"],
            frame["ci_high"],
            frame["_no_verdict"],
            strict=True,
        )
    ]
    geo = _geomean_rows(frame, sides, noise, "host" if options.by else "boot")
    if not geo.empty:
        frame = pd.concat([frame, geo], ignore_index=True)
    if imprecise:
        _mark_imprecise(frame, ok, set(imprecise))
    frame["is_baseline"] = frame["is_baseline"].astype(bool)
    return Comparison(
        rows=frame[COLUMNS].reset_index(drop=True),
        baseline=label,
        test=test,
        adjust=adjust,
        noise=noise,
        resamples=resamples,
        seed=seed,
        metrics=metrics,
        warnings=notes,
        by=options.by,
    )


def _mark_imprecise(frame: pd.DataFrame, ok: pd.DataFrame, imprecise: set[tuple[int, str]]) -> None:
    """Adaptive sampling ended these (configuration_id, probe) pairs short of their precision
    target. A row on either side of one, and a geomean over one, keeps a slower / faster
    verdict (its test and interval already account for the runs it has: sampling stopped on
    precision or time, never on the difference) with a warning, and says ``imprecise``
    instead of ``~``: "no difference seen" is not a conclusion an imprecise probe can give."""
    pairs = zip(ok["configuration_id"].astype(int), ok["probe"].astype(str), strict=True)
    hit = [pair in imprecise for pair in pairs]
    flagged = set(zip(ok.loc[hit, "probe"].astype(str), ok.loc[hit, "_key"], strict=True))
    base = frame[frame["is_baseline"].astype(bool)]
    base_of = dict(zip(base["probe"], base["config"], strict=True))
    bad = {
        i
        for i, probe, key, is_base in zip(
            frame.index, frame["probe"], frame["config"], frame["is_baseline"], strict=True
        )
        if not is_base and ((probe, key) in flagged or (probe, base_of.get(probe)) in flagged)
    }
    spoilt = {(frame.at[i, "metric"], frame.at[i, "config"]) for i in bad}
    for i in frame.index[(frame["probe"] == "geomean").to_numpy()]:
        if (frame.at[i, "metric"], frame.at[i, "config"]) in spoilt:
            bad.add(i)
    for i in sorted(bad):
        if frame.at[i, "verdict"] == "~":
            frame.at[i, "verdict"] = "imprecise"
        _warn(frame, i, "imprecise: adaptive sampling did not reach its precision target")


def _warn(frame: pd.DataFrame, i: int, text: str) -> None:
    old = frame["warnings"].loc[i]
    frame.at[i, "warnings"] = f"{old}; {text}" if old else text


def _verdict(p_adj: float, low: float, high: float, noise: float) -> str:
    if not (np.isfinite(p_adj) and p_adj < ALPHA):
        return "~"
    return _band_verdict(low, high, noise)


def _band_verdict(low: float, high: float, noise: float) -> str:
    if np.isfinite(low) and low > 1.0 + noise:
        return "slower"
    if np.isfinite(high) and high < 1.0 - noise:
        return "faster"
    return "~"


def _run_values(group: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(group[column], errors="coerce").to_numpy(dtype=np.float64)
    return values[np.isfinite(values)]


def _compare_metric(
    pruns: pd.DataFrame,
    probe: str,
    name: str,
    base_key: str,
    test: str,
    resamples: int,
    seed: int,
    rows: list[dict[str, Any]],
    ratios: dict[int, intervals.RatioInterval],
    sides: dict[int, tuple[boots.Units, boots.Units]],
    notes: list[str],
    boot_cost_s: float,
    between_boot: BetweenBoot | None = None,
) -> None:
    column, unit_override, better_override = METRICS[name]
    # A pooled comparison's clusters are its hosts (_pooled_by), another's its boots.
    word = "host" if "_pooled" in pruns else "boot"
    groups: dict[str, pd.DataFrame] = {str(key): g for key, g in pruns.groupby("_key", sort=False)}
    base = groups[base_key]
    base_vals = _run_values(base, column)
    base_units = _units(base, column)
    if base_vals.size == 0:
        notes.append(f"probe {probe}: metric {name} is missing in the baseline's runs")
        return
    first = base.iloc[0]
    better = better_override or str(first.get("better") or "lower")
    if name == "throughput":
        unit = first.get("throughput_unit") or "events/s"
    else:
        unit = unit_override or first.get("unit") or ""
    order = [base_key] + sorted(
        (k for k in groups if k != base_key),
        key=lambda k: (level_number(groups[k]["level"].iloc[0]), k),
    )
    for key in order:
        g = groups[key]
        vals = _run_values(g, column)
        if vals.size == 0:
            notes.append(f"probe {probe}, {key}: metric {name} is missing; skipped")
            continue
        is_base = key == base_key
        mean = float(vals.mean())
        sem = dist.sem(vals) if vals.size > 1 else math.nan
        warnings = []
        if vals.size < MIN_RUNS or base_vals.size < MIN_RUNS:
            warnings.append(
                f"few runs ({vals.size} vs {base_vals.size}): want >= {MIN_RUNS} per side"
            )
        cfg_units = _units(g, column)
        comp_ci = component_intervals(g, column)
        comp = comp_ci.components
        floor_test = test
        no_verdict = ""
        # A guest measured in one boot (its boots known): its runs say nothing about the next
        # boot, so no verdict about the configuration, unless a between-boot variance from
        # outside (a stored profile) stands in for the boots it lacks. A guest measured in
        # two boots or more may pool its variance of a boot mean with the profile's.
        ext_c = _external(between_boot, probe, g, cfg_units, word, name) if not is_base else None
        ext_b = (
            _external(between_boot, probe, base, base_units, word, name) if not is_base else None
        )
        lone = [
            who
            for units_, at, ext, who in (
                (cfg_units, g, ext_c, key),
                (base_units, base, ext_b, "the baseline"),
            )
            if ext is None and _one_boot_guest(units_, at)
        ]
        if is_base:
            ratio = intervals.RatioInterval(1.0, math.nan, math.nan)
            p = math.nan
        elif lone and not (cfg_units.boot_level or base_units.boot_level):
            # What is known: the difference within this boot (runs as the unit); no test.
            ratio = intervals.ratio_interval(vals, base_vals, better)
            p = math.nan
            no_verdict = f"one {word}"
            warnings.append(_one_boot_text(word, lone))
        elif (
            cfg_units.boot_level or base_units.boot_level or ext_c is not None or ext_b is not None
        ):
            # Boots are the unit above runs: a side with two boots or more enters as its boot
            # means, so the interval and the test see the boot-to-boot spread.
            # The test is the interval's dual, so verdict and interval agree; permuting 3
            # boot means against 3 could never reach a verdict under Holm.
            ratio = intervals.boot_ratio_interval(
                cfg_units, base_units, better, cfg_external=ext_c, base_external=ext_b
            )
            p = significance.boot_pvalue(
                cfg_units, base_units, cfg_external=ext_c, base_external=ext_b
            )
            floor_test = "welch"  # no floor: a continuous test
            for side, ext, who in ((cfg_units, ext_c, key), (base_units, ext_b, "the baseline")):
                if ext is not None:
                    warnings.extend(_external_text(side, ext, who, word))
            if lone:
                p = math.nan
                no_verdict = f"one {word}"
                warnings.append(_one_boot_text(word, lone))
            for side, other, who, at in (
                (cfg_units, base_units, key, g),
                (base_units, cfg_units, "the baseline", base),
            ):
                # L0's one boot is the machine's own: its runs are its unit, no warning
                # (but a pool of hosts with one host in it has one host, whatever its level).
                if (
                    not side.boot_level
                    and other.boot_level
                    and ("_pooled" in at or level_number(at["level"].iloc[0]) != 0)
                    and not lone
                ):
                    whose = "that" if word == "host" else "its"
                    warnings.append(
                        f"{who} has one {word}: the interval holds for {whose} {word} only"
                    )
        else:
            # Runs are the unit inside a boot: the run values carry the run-to-run spread that
            # the interval is about, whether or not the iterations inside them are stored.
            ratio = intervals.ratio_interval(vals, base_vals, better)
            p = significance.pvalue(vals, base_vals, test, resamples=resamples, seed=seed)
            warnings.append(ONE_BOOT.replace("boot", word))
        clustered = cfg_units.boot_level or base_units.boot_level
        ratios[len(rows)] = ratio
        sides[len(rows)] = (cfg_units, base_units)
        rows.append(
            {
                "probe": probe,
                "metric": name,
                "unit": unit,
                "better": better,
                "config": key,
                "level": str(g["level"].iloc[0]),
                "is_baseline": is_base,
                "n_runs": int(vals.size),
                "boots": int(cfg_units.boots),
                "between_share": comp.between_share,
                "share_low": comp_ci.share_low,
                "share_high": comp_ci.share_high,
                "between_var": comp.between,
                "between_low": comp_ci.between_low,
                "between_high": comp_ci.between_high,
                "within_var": comp.within,
                "within_low": comp_ci.within_low,
                "within_high": comp_ci.within_high,
                "runs_per_boot": _runs_per_boot(comp, g, boot_cost_s),
                "mean": mean,
                "stderr": sem,
                "stderr_pct": 100.0 * sem / abs(mean) if mean != 0 else math.nan,
                "delta_prev_pct": math.nan,
                "overhead": ratio.estimate,
                "ci_low": ratio.low,
                "ci_high": ratio.high,
                "p_value": p,
                "p_adjusted": math.nan,
                "verdict": "",
                "warnings": "; ".join(warnings),
                "_ratio": len(rows),
                "_labels": _labels_of(g),
                "_exp": int(g["experiment_id"].iloc[0]),
                "_n_base": int(base_units.values.size),
                "_n_units": int(cfg_units.values.size),
                "_unit_name": f"{word}s" if clustered else "runs",
                "_floor_test": floor_test,
                "_no_verdict": no_verdict,
            }
        )


#: A between-boot variance from outside the experiment for one probe's configuration (its
#: runs given), or None: the hook a stored noise profile plugs into (``compare``'s
#: ``between_boot``).
BetweenBoot = Callable[[str, pd.DataFrame], "boots.ExternalBetween | None"]


def _one_boot_guest(units: boots.Units, group: pd.DataFrame) -> bool:
    """A side measured in one boot whose boot is known (its runs carry a boot id) and varies: a
    guest level, or a pool of one host. L0's one boot is the machine's own, shared by every
    configuration measured on it. Runs without a recorded boot (stored before boot ids, or a
    frame built without a ``boot`` column) keep the per-run comparison with its warning: how
    many boots they came from is not known."""
    if units.boot_level or "boot" not in group:
        return False
    if "_pooled" in group:
        return True
    recorded = any(
        isinstance(b, str) and b and not b.startswith(boots.UNRECORDED_BOOT) for b in group["boot"]
    )
    return recorded and level_number(group["level"].iloc[0]) != 0


def _external(
    between_boot: BetweenBoot | None,
    probe: str,
    group: pd.DataFrame,
    units: boots.Units,
    word: str,
    metric: str = "mean",
) -> boots.ExternalBetween | None:
    """What the hook knows of this side's boots, where it may be used: a guest measured in
    one boot takes the between-boot variance (when the profile has one); a guest measured in
    two boots or more, the variance of a boot mean, for the run mean only (the metric a
    profile describes)."""
    if between_boot is None or word != "boot":
        return None
    if _one_boot_guest(units, group):
        ext = between_boot(probe, group)
        return ext if ext is not None and ext.between_known else None
    if units.boot_level and metric == "mean" and level_number(group["level"].iloc[0]) != 0:
        ext = between_boot(probe, group)
        return ext if ext is not None and ext.has_boot_mean else None
    return None


def _external_text(
    units: boots.Units, ext: boots.ExternalBetween, who: str, word: str
) -> list[str]:
    """The row's words on what a side took from outside: the between-boot variance (one
    boot), or its boot-mean variance pooled with the profile's, or the profile rejected by
    the F-test and the side's own boots used (:func:`vmtax.stats.intervals.borrowed`)."""
    if not units.boot_level:
        return [
            f"{who}: one {word}, its between-{word} variance from {ext.source} "
            f"({ext.dof:.3g} degrees of freedom)"
        ]
    got = intervals.borrowed(units, ext)
    if got is None or not math.isfinite(got.p):
        return []
    if got.used_profile:
        return [
            f"{who}: its variance of a {word} mean pooled with {ext.source} (F-test p = "
            f"{got.p:.2g}: a larger variance than the profile's not detected; "
            f"{got.df:.3g} degrees of freedom)"
        ]
    return [
        f"{who}: {ext.source} rejected (F-test: its {word}s vary F = {got.f:.3g}× the "
        f"profile's, p = {got.p:.2g} < {got.alpha:g}); its own {word}s' variance used "
        f"({got.df:.3g} degrees of freedom)"
    ]


def _one_boot_text(word: str, who: list[str]) -> str:
    sides = " and ".join(who)
    return (
        f"no verdict: {sides} measured in one {word}; the interval is the difference within "
        f"this {word}, and a verdict about the configuration needs 2 {word}s or more a side "
        f"(or a between-{word} variance from a stored profile)"
    )


def _boot_ids(group: pd.DataFrame) -> list[object] | None:
    """The runs' boots; None (one boot) for runs stored without a ``boot`` column."""
    if "boot" not in group:
        return None
    return [str(b) for b in group["boot"]]


def _units(group: pd.DataFrame, column: str) -> boots.Units:
    values = pd.to_numeric(group[column], errors="coerce").to_numpy(dtype=np.float64)
    rounds = group["run_index"].tolist() if "run_index" in group else None
    return boots.units(values, _boot_ids(group), rounds)


def components(group: pd.DataFrame, column: str) -> boots.VarianceComponents:
    """The variance components of one configuration's log run values."""
    values = pd.to_numeric(group[column], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(values)
    ids = _boot_ids(group) or ["one"] * len(values)
    return boots.variance_components(logs, ids)


def component_intervals(group: pd.DataFrame, column: str) -> boots.ComponentIntervals:
    """:func:`components` with their 95% intervals
    (:func:`vmtax.stats.boots.component_intervals`)."""
    values = pd.to_numeric(group[column], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(values)
    ids = _boot_ids(group) or ["one"] * len(values)
    return boots.component_intervals(logs, ids)


def _runs_per_boot(
    comp: boots.VarianceComponents, group: pd.DataFrame, boot_cost_s: float
) -> float:
    """Kalibera and Jones' runs per boot, with a run's cost its mean wall time; NaN when the
    components or the costs are not known."""
    run_cost = (
        float(pd.to_numeric(group["wall_s"], errors="coerce").mean())
        if "wall_s" in group
        else math.nan
    )
    try:
        return float(comp.runs_per_boot(boot_cost_s, run_cost))
    except ValueError:
        return math.nan


def _labels_of(group: pd.DataFrame) -> dict[str, str]:
    labels = group["labels"].iloc[0] if "labels" in group else None
    return {str(k).lower(): str(v).lower() for k, v in (labels or {}).items()}


def _compatible(a: dict[str, str], b: dict[str, str]) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _chain_deltas(frame: pd.DataFrame) -> None:
    """ΔL(n−1) in percent against the nearest lower level of the same chain.

    A chain is a set of configurations whose labels agree on every key they share (L0 usually
    has fewer labels than a VM level; levels measured in separate experiments, e.g. on the
    host and inside a guest, still chain). With two equally close candidates the one sharing
    more labels wins; a tie (the same configuration in two experiments) leaves the cell empty
    rather than guessing.
    """
    for _, part in frame.groupby(["probe", "metric"], sort=False):
        labels = part["_labels"]
        levels = {i: level_number(part["level"].loc[i]) for i in part.index}
        for i in part.index:
            li = levels[i]
            if not math.isfinite(li):
                continue
            cands = [
                j
                for j in part.index
                if math.isfinite(levels[j])
                and levels[j] < li
                and _compatible(labels.loc[i], labels.loc[j])
            ]
            if not cands:
                continue
            top = max(levels[j] for j in cands)
            near = [j for j in cands if levels[j] == top]
            shared = {j: len(labels.loc[i].keys() & labels.loc[j].keys()) for j in near}
            best = max(shared.values())
            winners = [j for j in near if shared[j] == best]
            if len(winners) != 1:
                continue
            means = part["mean"]
            prev = float(means.loc[winners[0]])
            if prev != 0:
                frame.at[i, "delta_prev_pct"] = 100.0 * (float(means.loc[i]) - prev) / prev


def _geomean_rows(
    frame: pd.DataFrame,
    sides: Mapping[int, tuple[boots.Units, boots.Units]],
    noise: float,
    word: str = "boot",
) -> pd.DataFrame:
    rows = []
    tested = frame[~frame["is_baseline"]]
    for (name, key), part in tested.groupby(["metric", "config"], sort=False):
        if part["probe"].nunique() < 2:
            continue
        est = part["overhead"].astype(float).to_numpy()
        if not (np.isfinite(est).all() and (est > 0).all()):
            continue
        pairs = [sides[int(r)] for r in part["_ratio"]]
        res = intervals.geomean_clustered(
            np.log(est).tolist(),
            [(c.values, c.clusters) for c, _ in pairs],
            [(b.values, b.clusters) for _, b in pairs],
            behrens_fisher=any(c.boot_level != b.boot_level for c, b in pairs),
        )
        unit = f"{word}s" if any(c.boot_level or b.boot_level for c, b in pairs) else "rounds"
        rows.append(
            {
                "probe": "geomean",
                "metric": name,
                "unit": "",
                "better": "lower",
                "config": key,
                "level": part["level"].iloc[0],
                "is_baseline": False,
                "n_runs": int(part["n_runs"].min()),
                "boots": int(part["boots"].min()),
                "between_share": math.nan,
                **dict.fromkeys(_COMPONENT_COLUMNS, math.nan),
                "runs_per_boot": math.nan,
                "mean": math.nan,
                "stderr": math.nan,
                "stderr_pct": math.nan,
                "delta_prev_pct": math.nan,
                "overhead": res.estimate,
                "ci_low": res.low,
                "ci_high": res.high,
                "p_value": math.nan,
                "p_adjusted": math.nan,
                # a geomean over a row measured in one boot is no verdict about it either
                "verdict": next(
                    (str(w) for w in part["_no_verdict"] if w),
                    _band_verdict(res.low, res.high, noise),
                ),
                "warnings": f"summary of {part['probe'].nunique()} probes, {unit} as the "
                "unit; not a test",
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)

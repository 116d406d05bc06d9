"""An overhead per operation decomposed by exit reason group:

    overhead ≈ Σ over groups (exits per operation × cost per exit) + residual

``overhead`` is the configuration's time per operation minus its baseline's (one level
down). The exits per operation come from the configuration's exit profile (recorded by the
hypervisor that runs it), net of the agent's start-up. The cost of one exit is its handling
time in that profile plus one round trip (the world switch out and back in, which the
profile cannot see), measured by the null-exit probe (cpuid) at the same configuration:

    round trip = (cpuid's overhead − cpuid's handling per op) / cpuid's exits per op

A halt's handling time is the time the vCPU slept (waiting, not work): it costs a round trip
only. A reason that was never timed costs the run's mean handling per timed exit.

The explained fraction (Σ / overhead) gets a 95% interval by the delta method over the
independent runs of the four samples it uses (stats.delta); when the probe explained is the
round-trip probe itself, the fraction is 1 by construction and says so.

Where the profile says which vCPU made each exit, ``split`` shows Σ per vCPU, and the
fraction on the measured path is the same sum over the vCPUs the pinned client and server
ran on (the runs' summaries record them), with the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from vmtax.hostprof.groups import GROUPS
from vmtax.stats.delta import delta_interval

#: Columns of ``explain()``: one row per (probe, group), then one ``residual`` row per probe.
COLUMNS = [
    "config", "baseline", "probe", "group", "exits_per_op", "cost_ns", "share", "top_reason",
    "handling_ns", "round_trip_ns", "cost_basis", "overhead_ns", "overhead_p", "explained",
    "explained_low", "explained_high", "runs", "baseline_runs", "path_vcpus", "path_explained",
    "path_explained_low", "path_explained_high",
]  # fmt: skip
#: Columns of ``split()``: one row per (probe, vCPU).
SPLIT_COLUMNS = [
    "config", "probe", "vcpu", "role", "exits_per_op", "explained_ns", "share",
]  # fmt: skip
RESIDUAL = "residual"
ALPHA = 0.05


@dataclass
class ProbeRuns:
    """One probe's runs at the configuration (those with a profile) and at the baseline.

    ``times`` and ``base_times`` are run means in ns per operation; ``reasons`` has one row
    per (run, reason) of the configuration's runs (``hostprof.perop.REASON_COLUMNS``);
    ``run_ids`` are the runs in the order of ``times``.
    """

    probe: str
    config: str
    baseline: str
    run_ids: np.ndarray
    times: np.ndarray
    base_times: np.ndarray
    reasons: pd.DataFrame
    #: ``reasons`` per vCPU (``hostprof.perop.VCPU_REASON_COLUMNS``); None or empty when the
    #: profiles do not say which vCPU made an exit.
    vcpu_reasons: pd.DataFrame | None = None
    #: The vCPUs of the measured path (the pinned client's, then its server's); None when
    #: the runs did not record them.
    path: tuple[int, ...] | None = None

    def per_run(self, vcpus: Sequence[int] | None = None) -> np.ndarray:
        """(runs, 3): time, handling ns and exits per operation of each run (on ``vcpus``
        only, when given)."""
        reasons = self.reasons
        if vcpus is not None:
            split = self.vcpu_reasons
            assert split is not None
            reasons = split[split["vcpu"].isin(list(vcpus))]
        sums = reasons.groupby("run_id")[["handling_ns", "exits_per_op"]].sum()
        sums = sums.reindex(self.run_ids).fillna(0.0)
        return np.column_stack([self.times, sums.to_numpy(dtype=np.float64)])

    def has_split(self) -> bool:
        return self.vcpu_reasons is not None and len(self.vcpu_reasons) > 0


def _round_trip(means: Sequence[np.ndarray]) -> float:
    """(cpuid's overhead − its handling per op) / its exits per op."""
    rt, rt_base = means[0], means[1]
    return float((rt[0] - rt_base[0] - rt[1]) / rt[2])


def _fraction(means: Sequence[np.ndarray]) -> float:
    p, base = means[0], means[1]
    e = _round_trip(means[2:])
    return float((p[1] + e * p[2]) / (p[0] - base[0]))


def round_trip(source: ProbeRuns) -> tuple[float, float, float]:
    """The round trip of one exit at the configuration, ns, with its 95% interval."""
    got = delta_interval(_round_trip, [source.per_run(), source.base_times])
    return got.estimate, got.low, got.high


def explain(probes: Sequence[ProbeRuns], source: ProbeRuns) -> pd.DataFrame:
    """The decomposition of every probe in ``probes``; ``source`` gives the round trip."""
    src = source.per_run()
    if src[:, 2].mean() <= 0:
        raise ValueError(f"{source.probe} shows no exits at {source.config}")
    e = _round_trip([src.mean(axis=0), np.atleast_1d(source.base_times.mean())])
    out = []
    for p in probes:
        out.append(_probe_rows(p, source, src, e))
    return pd.DataFrame([r for rows in out for r in rows], columns=COLUMNS)


def _probe_rows(p: ProbeRuns, source: ProbeRuns, src: np.ndarray, e: float) -> list[dict[str, Any]]:
    mine = p.per_run()
    overhead = float(p.times.mean() - p.base_times.mean())
    p_value = _overhead_p(p.times, p.base_times)
    detected = overhead > 0 and p_value < ALPHA
    calibration = p.probe == source.probe and p.config == source.config
    if calibration:
        fraction, low, high = 1.0, 1.0, 1.0
    elif detected:
        got = delta_interval(_fraction, [mine, p.base_times, src, source.base_times])
        fraction, low, high = got.estimate, got.low, got.high
    else:
        fraction = low = high = np.nan
    on_path = p.path if p.has_split() and p.path else None
    if on_path is not None and detected and not calibration:
        got = delta_interval(_fraction, [p.per_run(on_path), p.base_times, src, source.base_times])
        path = (got.estimate, got.low, got.high)
    else:
        path = (np.nan, np.nan, np.nan)
    common = {
        "config": p.config, "baseline": p.baseline, "probe": p.probe, "round_trip_ns": e,
        "overhead_ns": overhead, "overhead_p": p_value, "explained": fraction,
        "explained_low": low, "explained_high": high, "runs": len(p.times),
        "baseline_runs": len(p.base_times),
        "path_vcpus": ",".join(map(str, on_path)) if on_path is not None else "",
        "path_explained": path[0], "path_explained_low": path[1], "path_explained_high": path[2],
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    explained_ns = 0.0
    for group, reasons in _groups(p).items():
        exits = float(reasons["exits_per_op"].sum())
        handling = float(reasons["handling_ns"].sum())
        if exits <= 0:
            continue
        cost = handling / exits + e
        explained_ns += exits * cost
        top = reasons.assign(t=reasons["exits_per_op"] * e + reasons["handling_ns"])
        rows.append(
            {
                **common, "group": group, "exits_per_op": exits, "cost_ns": cost,
                "handling_ns": handling / exits,
                "share": exits * cost / overhead if detected or calibration else np.nan,
                "top_reason": str(top.sort_values("t", ascending=False)["reason"].iloc[0]),
                "cost_basis": _basis(reasons, source),
            }
        )  # fmt: skip
    rows.sort(key=lambda r: -float(r["exits_per_op"]) * float(r["cost_ns"]))
    residual_ns = overhead - explained_ns
    rows.append(
        {
            **common, "group": RESIDUAL, "exits_per_op": np.nan, "cost_ns": residual_ns,
            "handling_ns": np.nan, "top_reason": "",
            "share": residual_ns / overhead if detected or calibration else np.nan,
            "cost_basis": "overhead not carried by a counted exit",
        }
    )  # fmt: skip
    return rows


def split(probes: Sequence[ProbeRuns], source: ProbeRuns) -> pd.DataFrame:
    """Per probe and vCPU: exits per operation, what they cost (exits × round trip +
    handling, per operation) and that cost's share of the overhead; ``role`` says whether
    the pinned client or server ran there. Probes without a split have no rows."""
    src = source.per_run()
    e = _round_trip([src.mean(axis=0), np.atleast_1d(source.base_times.mean())])
    rows = []
    for p in probes:
        if not p.has_split():
            continue
        assert p.vcpu_reasons is not None
        overhead = float(p.times.mean() - p.base_times.mean())
        n = len(p.run_ids)
        roles = dict(zip(p.path or (), ("client", "server"), strict=False))
        if p.path and len(p.path) == 1:
            roles = {p.path[0]: "client and server"}
        for vcpu, sub in p.vcpu_reasons.groupby("vcpu"):
            exits = float(sub["exits_per_op"].sum()) / n
            cost = exits * e + float(sub["handling_ns"].sum()) / n
            rows.append(
                {
                    "config": p.config, "probe": p.probe, "vcpu": int(str(vcpu)),
                    "role": roles.get(int(str(vcpu)), "" if p.path else "not recorded"),
                    "exits_per_op": exits, "explained_ns": cost,
                    "share": cost / overhead if overhead > 0 else np.nan,
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS)


def _groups(p: ProbeRuns) -> dict[str, pd.DataFrame]:
    """Per group and reason: the mean over runs of exits and handling per operation."""
    n = len(p.run_ids)
    per = p.reasons.groupby(["group", "reason"], as_index=False).agg(
        exits_per_op=("exits_per_op", "sum"),
        handling_ns=("handling_ns", "sum"),
        basis=("basis", "first"),
    )
    per[["exits_per_op", "handling_ns"]] /= n
    rank = {g: i for i, g in enumerate(GROUPS)}
    return {
        str(g): sub
        for g, sub in sorted(per.groupby("group"), key=lambda kv: rank.get(str(kv[0]), 99))
    }


def _basis(reasons: pd.DataFrame, source: ProbeRuns) -> str:
    trip = f"{source.probe}'s round trip"
    kinds = set(reasons["basis"])
    if kinds == {"halt"}:
        return f"{trip} only (a halt's time is waiting)"
    if "counted" in kinds:
        return f"{trip} only (counts: no handling time)"
    if "untimed" in kinds:
        return f"mean timed handling + {trip}"
    return f"handling + {trip}"


def _overhead_p(times: np.ndarray, base: np.ndarray) -> float:
    """Welch's two-sided p that the configuration's time per operation equals the baseline's."""
    if len(times) < 2 or len(base) < 2:
        return np.nan
    return float(stats.ttest_ind(times, base, equal_var=False).pvalue)

"""A stored sweep as figures: per step throughput and response time with intervals,
utilisation, steal and paging beside them, and the analysis (knee, why flat, response-time
rise, SLO). This is what ``vmtax sweep show`` prints and the report draws.

The unit is the replicate mean: each stored unit (one step of one replicate) is reduced to
the mean over its steady-state window first, and every interval and test runs on those
(``stats.knee``); the window's samples are never counted as independent repeats."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vmtax.errors import VmtaxError
from vmtax.stats.knee import (
    classify_flat,
    find_knee,
    replicate_interval,
    response_rise,
    slo_check,
)
from vmtax.sweep.run import throughput_unit
from vmtax.sweep.spec import SweepSpec

if TYPE_CHECKING:
    from vmtax.store import Store


@dataclass
class StepFigures:
    index: int
    ratio: float
    status: str
    guests: int
    vcpus: int
    guest_memory_mb: int
    samples: int
    throughput: float | None
    throughput_low: float | None
    throughput_high: float | None
    resp_mean_s: float | None
    resp_p95_s: float | None
    host_util: float | None
    guest_util: float | None
    steal: float | None
    vcpu_wait: float | None
    rss_mb: float | None
    major_faults: float | None
    paging: dict[str, float] | None
    error: str | None
    #: The throughput of each committed replicate (the mean over its window), in run order
    #: of the rounds, and the round of each.
    replicate_means: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)


@dataclass
class SweepSummary:
    experiment_id: int
    status: str
    spec: dict[str, Any]
    throughput_unit: str
    steps: list[StepFigures]
    knee: dict[str, float | str | None] | None  # low and high are None without intervals
    knee_shape: str
    knee_reason: str
    flat: dict[str, Any] | None
    resp_rise_ratio: float | None
    slo: dict[str, Any]
    #: Per later step: ratio, relative rise of the response time, Holm-adjusted p.
    resp_rise_steps: list[tuple[float, float, float]] = field(default_factory=list)
    replicates: int = 1
    order_seed: int = 0
    intervals: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps"] = [
            {
                "ratio": s.ratio,
                "status": s.status,
                "guests": s.guests,
                "vcpus": s.vcpus,
                "guest_memory_mb": s.guest_memory_mb,
                "throughput": {
                    "mean": s.throughput,
                    "ci_low": s.throughput_low,
                    "ci_high": s.throughput_high,
                    "unit": self.throughput_unit,
                    "samples": s.samples,
                    "replicates": len(s.replicate_means),
                    "replicate_means": s.replicate_means,
                },
                "response_time_s": {"mean": s.resp_mean_s, "p95": s.resp_p95_s},
                "p95_response_s": s.resp_p95_s,
                "utilisation": {"host": s.host_util, "guests": s.guest_util},
                "steal": {"guest_reported": s.steal, "vcpu_run_queue_wait": s.vcpu_wait},
                "memory": {
                    "rss_mb": s.rss_mb,
                    "major_faults_per_s": s.major_faults,
                    "paging": s.paging,
                },  # fmt: skip
                "error": s.error,
            }
            for s in self.steps
        ]
        return _finite(out)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _mean(values: pd.Series) -> float | None:
    x = pd.to_numeric(values, errors="coerce").dropna()
    return float(x.mean()) if len(x) else None


def summarise(store: Store, experiment_id: int) -> SweepSummary:
    exp = store.experiment(experiment_id)
    plan = exp.get("plan") or {}
    if "sweep" not in plan:
        raise VmtaxError(f"experiment {experiment_id} is not a sweep")
    spec = SweepSpec.from_plan(plan["sweep"])
    n_steps = len(spec.ratios)
    units_df = store.sweeps.steps(experiment_id)
    # The latest attempt of each unit: an ok row if there is one, else the last failure.
    units = []
    for _, group in units_df.groupby("step_index", sort=True):
        ok = group[group["status"] == "ok"]
        units.append((ok if len(ok) else group).iloc[-1])
    samples_df = store.sweeps.samples([int(r["id"]) for r in units])
    window_all = samples_df[samples_df["phase"] == "window"]
    by_step: dict[int, list[Any]] = {}
    for r in units:
        by_step.setdefault(int(r["step_index"]) % n_steps, []).append(r)
    figures = []
    tputs, resps, utils = [], [], []
    for index in sorted(by_step):
        rows = by_step[index]
        ok_rows = [r for r in rows if r["status"] == "ok"]
        ids = [r["id"] for r in ok_rows] or [rows[-1]["id"]]
        s = window_all[window_all["step_id"].isin(ids)]
        means, rounds, resp, p95s, host_util = [], [], [], [], []
        for r in ok_rows:
            w = s[s["step_id"] == r["id"]]
            tput = _mean(w["throughput"])
            if tput is None:
                continue
            detail = r["detail"] or {}
            means.append(tput)
            rounds.append(int(r["step_index"]) // n_steps)
            resp.append(detail.get("resp_mean_s") or _mean(w["resp_mean_s"]) or math.nan)
            p95s.append(detail.get("resp_p95_s") or math.nan)
            host_util.append(_mean(w["host_util"]) or math.nan)
        mean = float(np.mean(means)) if means else None
        low = high = None
        if spec.intervals and len(means) >= 2:
            _, lo, hi = replicate_interval(np.asarray(means))
            low, high = float(lo), float(hi)
        last = rows[-1] if not ok_rows else ok_rows[-1]
        paging = None
        mems = [m for m in s["memory"] if isinstance(m, dict)]
        if mems:
            keys = {k for m in mems for k in m if k.endswith("_per_s") or k.endswith("_mb")}
            paging = {k: float(np.mean([m[k] for m in mems if k in m])) for k in sorted(keys)}
            events = {k: v for k, v in mems[-1].items() if k.startswith("event_")}
            paging.update({k: float(v) for k, v in events.items()})
        failed = [r for r in rows if r["status"] != "ok"]
        p95_known = [p for p in p95s if math.isfinite(p)]
        figures.append(
            StepFigures(
                index=index,
                ratio=float(last["ratio"]),
                status="ok" if ok_rows and not failed else str((failed or rows)[-1]["status"]),
                guests=int(last["guests"]),
                vcpus=int(last["vcpus"]),
                guest_memory_mb=int(last["guest_memory_mb"]),
                samples=len(s),
                throughput=mean,
                throughput_low=low,
                throughput_high=high,
                resp_mean_s=_nanmean(resp),
                resp_p95_s=float(np.mean(p95_known)) if p95_known else None,
                host_util=_mean(s["host_util"]),
                guest_util=_mean(s["guest_util"]),
                steal=_mean(s["steal"]),
                vcpu_wait=_mean(s["vcpu_wait"]),
                rss_mb=_mean(s["rss_mb"]),
                major_faults=_mean(s["major_faults"]),
                paging=paging,
                error=failed[-1]["error"] if failed else None,
                replicate_means=means,
                rounds=rounds,
            )
        )
        if means:
            tputs.append((float(last["ratio"]), means, rounds))
            resps.append((float(last["ratio"]), resp, rounds))
            utils.append((float(last["ratio"]), host_util))
    blocks = [b for _, _, b in tputs] if spec.replicates > 1 else None
    fit = find_knee([r for r, _, _ in tputs], [v for _, v, _ in tputs], blocks=blocks)
    if not spec.intervals and fit.knee is not None:
        fit = replace(fit, knee=replace(fit.knee, low=None, high=None))
    flat = classify_flat(fit.knee, [r for r, _ in utils], [v for _, v in utils])
    rise = (
        response_rise([r for r, _, _ in resps], [v for _, v, _ in resps], blocks=blocks)
        if spec.intervals
        else None
    )
    measured = [f for f in figures if f.status == "ok"]
    slo = slo_check(
        [f.ratio for f in measured],
        [f.resp_p95_s if f.resp_p95_s is not None else math.nan for f in measured],
        spec.slo_s,
    )
    return SweepSummary(
        experiment_id=experiment_id,
        status=str(exp.get("status")),
        spec=plan["sweep"],
        throughput_unit=throughput_unit(spec),
        steps=figures,
        knee=fit.knee.as_dict() if fit.knee else None,
        knee_shape=fit.shape,
        knee_reason=fit.reason,
        flat=flat.as_dict() if flat else None,
        resp_rise_ratio=rise.ratio if rise else None,
        slo={
            "limit_s": slo.limit_s,
            "max_ratio": slo.max_ratio,
            "steps": [{"ratio": r, "p95_s": p, "ok": ok_} for r, p, ok_ in slo.steps],
        },  # fmt: skip
        resp_rise_steps=list(rise.steps) if rise else [],
        replicates=spec.replicates,
        order_seed=spec.order_seed,
        intervals=spec.intervals,
    )


def _nanmean(values: list[float]) -> float | None:
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None

"""A stored sweep as figures: per step throughput and response time with intervals,
utilisation, steal and paging beside them, and the analysis (knee, why flat, response-time
rise, SLO). This is what ``vmtax sweep show`` prints and the report draws."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from vmtax.errors import VmtaxError
from vmtax.stats.describe import mean_interval
from vmtax.stats.knee import classify_flat, find_knee, response_rise, slo_check
from vmtax.store import Store
from vmtax.sweep import store as sweep_store
from vmtax.sweep.run import throughput_unit
from vmtax.sweep.spec import SweepSpec


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


@dataclass
class SweepSummary:
    experiment_id: int
    status: str
    spec: dict[str, Any]
    throughput_unit: str
    steps: list[StepFigures]
    knee: dict[str, float] | None
    knee_shape: str
    knee_reason: str
    flat: dict[str, Any] | None
    resp_rise_ratio: float | None
    slo: dict[str, Any]
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
    steps_df = sweep_store.steps(store, experiment_id)
    # The latest attempt of each step: an ok row if there is one, else the last failure.
    rows = []
    for _, group in steps_df.groupby("step_index", sort=True):
        ok = group[group["status"] == "ok"]
        rows.append((ok if len(ok) else group).iloc[-1])
    samples_df = sweep_store.samples(store, [int(r["id"]) for r in rows])
    figures, tputs, resps, utils = [], [], [], []
    for r in rows:
        s = samples_df[(samples_df["step_id"] == r["id"]) & (samples_df["phase"] == "window")]
        mean, _, _, low, high = mean_interval(s["throughput"])
        detail = r["detail"] or {}
        paging = None
        mems = [m for m in s["memory"] if isinstance(m, dict)]
        if mems:
            keys = {k for m in mems for k in m if k.endswith("_per_s") or k.endswith("_mb")}
            paging = {k: float(np.mean([m[k] for m in mems if k in m])) for k in sorted(keys)}
            events = {k: v for k, v in mems[-1].items() if k.startswith("event_")}
            paging.update({k: float(v) for k, v in events.items()})
        figures.append(
            StepFigures(
                index=int(r["step_index"]),
                ratio=float(r["ratio"]),
                status=str(r["status"]),
                guests=int(r["guests"]),
                vcpus=int(r["vcpus"]),
                guest_memory_mb=int(r["guest_memory_mb"]),
                samples=len(s),
                throughput=None if math.isnan(mean) else mean,
                throughput_low=None if math.isnan(low) else low,
                throughput_high=None if math.isnan(high) else high,
                resp_mean_s=detail.get("resp_mean_s"),
                resp_p95_s=detail.get("resp_p95_s"),
                host_util=_mean(s["host_util"]),
                guest_util=_mean(s["guest_util"]),
                steal=_mean(s["steal"]),
                vcpu_wait=_mean(s["vcpu_wait"]),
                rss_mb=_mean(s["rss_mb"]),
                major_faults=_mean(s["major_faults"]),
                paging=paging,
                error=r["error"],
            )
        )
        if r["status"] == "ok":
            tputs.append((float(r["ratio"]), s["throughput"].dropna().to_numpy(float)))
            resps.append((float(r["ratio"]), s["resp_mean_s"].dropna().to_numpy(float)))
            utils.append((float(r["ratio"]), s["host_util"].dropna().to_numpy(float)))
    fit = find_knee([r for r, _ in tputs], [v for _, v in tputs])
    flat = classify_flat(fit.knee, [r for r, _ in utils], [v for _, v in utils])
    rise = response_rise([r for r, _ in resps], [v for _, v in resps])
    ok = [f for f in figures if f.status == "ok"]
    slo = slo_check(
        [f.ratio for f in ok],
        [f.resp_p95_s if f.resp_p95_s is not None else math.nan for f in ok],
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
        resp_rise_ratio=rise.ratio,
        slo={
            "limit_s": slo.limit_s,
            "max_ratio": slo.max_ratio,
            "steps": [{"ratio": r, "p95_s": p, "ok": ok_} for r, p, ok_ in slo.steps],
        },  # fmt: skip
    )

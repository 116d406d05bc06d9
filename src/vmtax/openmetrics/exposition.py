"""One experiment's overheads and intervals as OpenMetrics text, written by prometheus-client
(its exposition escapes label values as the format requires and ends the text with ``# EOF``).

Every family is a gauge without timestamps: the textfile collector and the pushgateway refuse
samples with timestamps, and the Prometheus text parser knows no ``stateset`` or ``info``
type, so the verdict is the usual enum of 0/1 gauges and the experiment's facts an ``_info``
gauge of value 1. Non-finite values (a geomean's p-value, a missing interval) are left out.

Labels: ``experiment``, ``probe``, ``metric``, ``config``, ``level``, ``baseline`` and the
configuration's own labels; a label key that is not a valid label name is made one (invalid
characters become ``_``), and one that clashes with the fixed labels, or another key, gets a
``label_`` prefix (docs/metrics.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

#: The labels every overhead sample has; a configuration's label may not take these names.
FIXED = ("experiment", "probe", "metric", "config", "level", "baseline", "unit", "verdict")
#: The verdict enum: each row has one sample per state, 1 for its verdict and 0 otherwise.
VERDICTS = {
    "slower": "slower",
    "faster": "faster",
    "~": "not_detected",
    "imprecise": "imprecise",
}
NO_VERDICT = "no_verdict"

_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Experiment:
    """What the text says about the experiment itself."""

    experiment_id: int
    suite: str
    status: str
    started: float | None  # Unix seconds
    baseline: str | None
    vmtax_version: str


@dataclass(frozen=True)
class Level:
    """One probe of one configuration: its run-level mean, runs and boots."""

    probe: str
    config: str
    level: str
    labels: Mapping[str, str]
    unit: str
    mean: float
    runs: int
    boots: int


@dataclass(frozen=True)
class Overhead:
    """One row of a comparison (``stats.compare``'s columns)."""

    probe: str
    metric: str
    config: str
    level: str
    labels: Mapping[str, str]
    overhead: float
    ci_low: float
    ci_high: float
    p_adjusted: float
    verdict: str


def label_names(keys: Iterable[str]) -> dict[str, str]:
    """A valid, unique Prometheus label name for each configuration label key."""
    out: dict[str, str] = {}
    taken = set(FIXED)
    for key in sorted(keys):
        name = re.sub(r"[^a-zA-Z0-9_]", "_", key) or "_"
        if not _NAME.fullmatch(name):
            name = f"_{name}"
        if name in taken or name.startswith("__"):
            name = f"label_{name.lstrip('_')}"
        base, n = name, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        out[key] = name
        taken.add(name)
    return out


class _Families(Collector):
    """The metric families of one export, yielded to prometheus-client's writer."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def _gauge(name: str, doc: str, unit: str = "") -> Metric:
    return Metric(name, doc, "gauge", unit)


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def render(exp: Experiment, levels: Iterable[Level], overheads: Iterable[Overhead]) -> str:
    """The OpenMetrics text of one experiment."""
    levels, overheads = list(levels), list(overheads)
    names = label_names(
        {k for x in levels for k in x.labels} | {k for x in overheads for k in x.labels}
    )
    common = {"experiment": str(exp.experiment_id)}

    def labels_of(x: Level | Overhead, **extra: str) -> dict[str, str]:
        out = {**common, "probe": x.probe, "config": x.config, "level": x.level, **extra}
        out.update({names[k]: str(v) for k, v in x.labels.items()})
        return out

    info = _gauge(
        "vmtax_experiment_info",
        "The experiment these metrics come from: its suite, status, baseline and vmtax version.",
    )
    info.add_sample(
        "vmtax_experiment_info",
        {
            **common,
            "suite": exp.suite,
            "status": exp.status,
            "baseline": exp.baseline or "",
            "vmtax_version": exp.vmtax_version,
        },
        1.0,
    )
    families = [info]
    if exp.started is not None:
        started = _gauge(
            "vmtax_experiment_start_time_seconds",
            "When the experiment started, in seconds since the Unix epoch.",
            "seconds",
        )
        started.add_sample("vmtax_experiment_start_time_seconds", common, float(exp.started))
        families.append(started)

    mean = _gauge("vmtax_probe_mean", "Mean of the runs' iteration means, in the unit label.")
    runs = _gauge("vmtax_probe_runs", "Completed runs of the probe in the configuration.")
    boots = _gauge("vmtax_probe_boots", "Boots the configuration's runs were measured in.")
    for lv in levels:
        if _finite(lv.mean):
            mean.add_sample("vmtax_probe_mean", labels_of(lv, unit=lv.unit), float(lv.mean))
        runs.add_sample("vmtax_probe_runs", labels_of(lv), float(lv.runs))
        boots.add_sample("vmtax_probe_boots", labels_of(lv), float(lv.boots))
    families += [mean, runs, boots]

    if overheads:
        base = {"baseline": exp.baseline or ""}
        ratio = _gauge(
            "vmtax_overhead_ratio",
            "Overhead against the baseline (above 1: slower, for every metric).",
            "ratio",
        )
        lower = _gauge(
            "vmtax_overhead_lower_ratio", "Lower bound of the overhead's 95% interval.", "ratio"
        )
        upper = _gauge(
            "vmtax_overhead_upper_ratio", "Upper bound of the overhead's 95% interval.", "ratio"
        )
        p_adj = _gauge(
            "vmtax_overhead_p_adjusted",
            "p-value of the difference, adjusted across the comparison (Holm).",
        )
        verdict = _gauge(
            "vmtax_overhead_verdict",
            "1 for the row's verdict, 0 for the others: slower, faster, not_detected, "
            "imprecise, no_verdict.",
        )
        for row in overheads:
            at = labels_of(row, metric=row.metric, **base)
            for family, value in (
                (ratio, row.overhead),
                (lower, row.ci_low),
                (upper, row.ci_high),
                (p_adj, row.p_adjusted),
            ):
                if _finite(value):
                    family.add_sample(family.name, at, float(value))
            state = VERDICTS.get(row.verdict, NO_VERDICT)
            for name in (*VERDICTS.values(), NO_VERDICT):
                verdict.add_sample(
                    "vmtax_overhead_verdict", {**at, "verdict": name}, float(name == state)
                )
        families += [ratio, lower, upper, p_adj, verdict]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode("utf-8")

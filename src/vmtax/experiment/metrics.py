"""The OpenMetrics export (`vmtax results export --format openmetrics`): one experiment's
configurations, and their overheads against a baseline with the intervals and verdicts of
`vmtax compare`, as OpenMetrics text (vmtax.openmetrics)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from vmtax.experiment.compare import measured
from vmtax.experiment.lookup import experiment_id
from vmtax.openmetrics import exposition
from vmtax.stats.compare_options import CompareOptions
from vmtax.store import Store
from vmtax.version import __version__

#: The baseline an export takes when none is given: L0, when the experiment has one L0
#: configuration and at least one other.
DEFAULT_BASELINE = "level=L0"


@dataclass(frozen=True)
class MetricsText:
    """The text and what it holds, for the line the command prints."""

    text: str
    experiment_id: int
    baseline: str | None
    configurations: int
    overheads: int
    #: Why the text has no overheads (no baseline), or None.
    note: str | None


def _levels(ok: pd.DataFrame) -> list[exposition.Level]:
    out = []
    for (probe, config), g in ok.groupby(["probe", "config"], sort=True):
        out.append(
            exposition.Level(
                probe=str(probe),
                config=str(config),
                level=str(g["level"].iloc[0]),
                labels={str(k): str(v) for k, v in (g["labels"].iloc[0] or {}).items()},
                unit=str(g["unit"].iloc[0] or ""),
                mean=float(pd.to_numeric(g["mean"], errors="coerce").mean()),
                runs=len(g),
                boots=int(g["boot"].nunique()),
            )
        )
    return out


def _default_baseline(ok: pd.DataFrame) -> tuple[str | None, str | None]:
    """(the baseline, or None with the reason there is none)."""
    configs = ok.drop_duplicates("config")
    l0 = configs[configs["level"].astype(str).str.upper() == "L0"]
    if len(configs) < 2:
        return None, "one configuration, nothing to compare it with"
    if len(l0) != 1:
        return None, (
            f"{len(l0)} L0 configurations, so no default baseline (give --baseline, e.g. "
            f"{DEFAULT_BASELINE},accel=kvm)"
            if len(l0)
            else f"no L0 configuration (give --baseline, e.g. level={configs['level'].iloc[0]})"
        )
    return DEFAULT_BASELINE, None


def openmetrics(
    db: str | None,
    ref: str,
    baseline: str | None = None,
    options: CompareOptions | None = None,
) -> MetricsText:
    """OpenMetrics text of experiment ``ref`` (an id or ``latest``): every configuration's
    means, runs and boots, and, with a baseline (given, or the default), the overheads."""
    with Store.open(db, read_only=True) as store:
        exp_id = experiment_id(store, ref)
        exp = store.experiment(exp_id)
        runs = store.runs([f"exp={exp_id}"])
    ok = runs[runs["status"] == "ok"]
    note = None
    if baseline is None:
        baseline, note = _default_baseline(ok)
    overheads: list[exposition.Overhead] = []
    if baseline is not None and not ok.empty:
        comp = measured([f"exp={exp_id}"], baseline, options or CompareOptions(), db=db)
        labels = {
            str(c): {str(k): str(v) for k, v in (lab or {}).items()}
            for c, lab in zip(ok["config"], ok["labels"], strict=True)
        }
        for r in comp.rows[~comp.rows["is_baseline"]].to_dict("records"):
            overheads.append(
                exposition.Overhead(
                    probe=str(r["probe"]),
                    metric=str(r["metric"]),
                    config=str(r["config"]),
                    level=str(r["level"]),
                    labels=labels.get(str(r["config"]), {}),
                    overhead=float(r["overhead"]),
                    ci_low=float(r["ci_low"]),
                    ci_high=float(r["ci_high"]),
                    p_adjusted=float(r["p_adjusted"]),
                    verdict=str(r["verdict"]),
                )
            )
    elif ok.empty:
        note = "no completed runs"
    started = exp.get("started_at")
    info = exposition.Experiment(
        experiment_id=exp_id,
        suite=str(exp.get("suite") or ""),
        status=str(exp.get("status") or ""),
        started=started.timestamp() if started is not None else None,
        baseline=baseline,
        vmtax_version=__version__,
    )
    levels = _levels(ok) if not ok.empty else []
    return MetricsText(
        text=exposition.render(info, levels, overheads),
        experiment_id=exp_id,
        baseline=baseline,
        configurations=int(ok["config"].nunique()) if not ok.empty else 0,
        overheads=len(overheads),
        note=note,
    )

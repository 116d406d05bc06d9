"""Reading back where adaptive sampling left each probe, for the run's closing lines and for
`vmtax compare` (which shows ``imprecise`` instead of a verdict for such probes)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import select

from vmtax.sampling import noise
from vmtax.store.models import Configuration, SamplingLook, SamplingOutcome

if TYPE_CHECKING:
    from vmtax.store import Store

COLUMNS = [
    "configuration_id", "experiment_id", "config", "level", "probe", "n_runs", "mean",
    "half_width", "target", "status", "reason", "duration_s", "iterations",
]  # fmt: skip


def outcomes(store: Store, experiment_ids: Iterable[int]) -> pd.DataFrame:
    """One row per (configuration, probe) that adaptive sampling finished, with the
    configuration's key and level."""
    ids = sorted({int(i) for i in experiment_ids})
    if not ids:
        return pd.DataFrame(columns=COLUMNS)
    o = SamplingOutcome.__table__
    c = Configuration.__table__
    stmt = (
        select(
            o.c.configuration_id,
            o.c.experiment_id,
            c.c.config_key,
            c.c.level,
            o.c.probe,
            o.c.n_runs,
            o.c.mean,
            o.c.half_width,
            o.c.target,
            o.c.status,
            o.c.reason,
            o.c.duration_s,
            o.c.iterations,
        )  # fmt: skip
        .join(c, c.c.id == o.c.configuration_id)
        .where(o.c.experiment_id.in_(ids))
        .order_by(o.c.configuration_id, o.c.probe)
    )
    with store.engine.connect() as connection:
        rows = connection.execute(stmt).all()
    return pd.DataFrame(rows, columns=COLUMNS)


def imprecise(store: Store, runs: pd.DataFrame) -> set[tuple[int, str]]:
    """(configuration_id, probe) of every probe in ``runs`` whose sampling ended imprecise."""
    if runs.empty:
        return set()
    found = outcomes(store, runs["experiment_id"].unique())
    bad = found[found["status"] == "imprecise"]
    return {(int(c), str(p)) for c, p in zip(bad["configuration_id"], bad["probe"], strict=True)}


def noise_by_config(store: Store, experiment_id: int) -> dict[int, dict[str, float]]:
    """Per configuration, the summary of every noise sample its looks stored."""
    t = SamplingLook.__table__
    stmt = (
        select(t.c.configuration_id, t.c.noise_before, t.c.noise_after)
        .where(t.c.experiment_id == experiment_id)
        .order_by(t.c.id)
    )
    with store.engine.connect() as connection:
        rows = connection.execute(stmt).all()
    samples: dict[int, list[dict[str, Any]]] = {}
    for config_id, before, after in rows:
        samples.setdefault(int(config_id), []).extend(x for x in (before, after) if x)
    return {c: noise.summary(s) for c, s in samples.items()}


def lines(store: Store, experiment_id: int) -> list[str]:
    """The closing lines of an adaptive run: one summary line per configuration, then one
    line per probe that missed its target, with the half-width it reached and the noise."""
    found = outcomes(store, [experiment_id])
    if found.empty:
        return []
    noise_of = noise_by_config(store, experiment_id)
    out: list[str] = []
    for config_id, part in found.groupby(found["configuration_id"].astype(int), sort=False):
        target = float(part["target"].iloc[0])
        ok = int((part["status"] == "precise").sum())
        n = noise_of.get(int(config_id), {})
        out.append(
            f"precision {part['config'].iloc[0]}: {ok} of {len(part)} probes within "
            f"±{_pct(target)} (95% CI half-width){_noise_text(n)}"
        )
        missed = part[part["status"] == "imprecise"]
        for probe, config, half_width, n_runs, reason in zip(
            missed["probe"], missed["config"], missed["half_width"], missed["n_runs"],
            missed["reason"], strict=True,
        ):  # fmt: skip
            h = math.nan if half_width is None else float(half_width)
            reached, needed = "no interval", ""
            if math.isfinite(h):
                # The half-width shrinks as 1/sqrt(n): the runs this spread would need.
                reached = f"±{_pct(h)}"
                needed = f", about {math.ceil(n_runs * (h / target) ** 2)} runs needed"
            out.append(
                f"imprecise: {probe} at {config}: {reached} after {n_runs} runs, "
                f"target ±{_pct(target)}{needed} "
                f"({_REASONS.get(str(reason), str(reason))}); "
                "a verdict only where the difference is clear"
            )
    return out


_REASONS = {
    "budget": "the time budget ran out",
    "max_runs": "the run limit was reached",
    "failed": "its runs failed",
    "stopped": "the run was stopped",
}


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.2g}%" if fraction < 0.1 else f"{100 * fraction:.0f}%"


def _noise_text(n: dict[str, float]) -> str:
    if not n:
        return ""
    parts = []
    if math.isfinite(n.get("other_cpu_pct", math.nan)):
        parts.append(f"other CPU use up to {n['other_cpu_pct']:.0f}%")
    if math.isfinite(n.get("procs_running", math.nan)):
        parts.append(f"{n['procs_running']:.0f} other runnable tasks")
    if math.isfinite(n.get("steal_ticks", math.nan)) and n["steal_ticks"] > 0:
        parts.append(f"steal up to {n['steal_ticks']:.0f} ticks")
    if math.isfinite(n.get("clock_change", math.nan)):
        parts.append(f"core clock moved up to {100 * n['clock_change']:.0f}%")
    return "; noise: " + ", ".join(parts) if parts else ""

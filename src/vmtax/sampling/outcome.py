"""Reading back where adaptive sampling left each probe, for the run's closing lines and for
`vmtax compare` (which shows ``imprecise`` instead of a verdict for such probes)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from vmtax.sampling import noise
from vmtax.store.sampling import OUTCOME_COLUMNS

if TYPE_CHECKING:
    from vmtax.store import Store

COLUMNS = OUTCOME_COLUMNS


class Outcomes(Protocol):
    def outcomes(self, experiment_ids: Sequence[int]) -> pd.DataFrame: ...


class OutcomeSource(Protocol):
    """What :func:`outcomes` and :func:`imprecise` read: a ``Store``, or the read-only
    ``store.reader.StoreReader``, whose ``sampling.outcomes`` answer alike."""

    @property
    def sampling(self) -> Outcomes: ...


def outcomes(store: OutcomeSource, experiment_ids: Iterable[int]) -> pd.DataFrame:
    """One row per (configuration, probe) that adaptive sampling finished, with the
    configuration's key and level."""
    return store.sampling.outcomes(sorted({int(i) for i in experiment_ids}))


def imprecise(store: OutcomeSource, runs: pd.DataFrame) -> set[tuple[int, str]]:
    """(configuration_id, probe) of every probe in ``runs`` whose sampling ended imprecise."""
    if runs.empty:
        return set()
    found = outcomes(store, runs["experiment_id"].unique())
    bad = found[found["status"] == "imprecise"]
    return {(int(c), str(p)) for c, p in zip(bad["configuration_id"], bad["probe"], strict=True)}


def noise_by_config(store: Store, experiment_id: int) -> dict[int, dict[str, float]]:
    """Per configuration, the summary of every noise sample its looks stored."""
    rows = store.sampling.noise(experiment_id)
    samples: dict[int, list[dict[str, Any]]] = {}
    for config_id, before, after in rows:
        samples.setdefault(config_id, []).extend(x for x in (before, after) if x)
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
    "one_boot": "one boot: precise about this boot only; the configuration needs 2 boots or more",
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

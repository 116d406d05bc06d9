"""The compare use case (`vmtax compare`): stored runs against a baseline, as
:func:`vmtax.stats.compare.compare` judges them with one :class:`CompareOptions`; a reference
dataset recomputed, or set beside the measured configurations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from vmtax.errors import UsageError
from vmtax.gate.judge import Outcome, judge
from vmtax.gate.rule import Rule
from vmtax.refs import beside, datasets, recompute
from vmtax.sampling.outcome import imprecise as imprecise_of
from vmtax.store.reader import StoreReader
from vmtax.store.select import resolve

if TYPE_CHECKING:
    from vmtax.stats.compare import Comparison
    from vmtax.stats.compare_options import CompareOptions


def measured(
    selectors: list[str],
    baseline: str,
    options: CompareOptions,
    *,
    metric: list[str] | None = None,
    db: str | None = None,
) -> Comparison:
    """Load runs (selectors OR baseline) from the store and compare them with the baseline."""
    # heavy: scipy and statsmodels, only when measured runs are compared
    from vmtax.stats.compare import compare

    # The store's read-only door: a SQLite store is read without SQLAlchemy (store.reader).
    with StoreReader.open(db) as store:
        chosen = store.runs(selectors)
        if (chosen["status"] != "ok").all():
            raise UsageError(
                f"no completed runs match {' '.join(selectors) or 'the store'} in "
                f"{store.url_display}"
            )
        # The positional selectors scope the baseline: exp=latest --baseline level=L0 is the
        # latest experiment's L0 (the same resolver serves report and artifacts).
        resolved = resolve(store, selectors, baseline, options.by)
        runs = resolved.runs
        imprecise = imprecise_of(store, runs)
        profiled = None
        if store.has_noise_profiles():
            # heavy: the profiles' use case (vmtax.noise), only for a store that has profiles
            from vmtax.experiment.calibrate import between_boot

            # a stored profile's between-boot variance: all of it for a side in one boot,
            # pooled with the side's own boots for two or more (docs/statistics.md)
            profiled = between_boot(store.store(), runs)
    # No mask only for an empty --baseline: compare() then reports the selector itself.
    base = resolved.baseline_mask if resolved.baseline_mask is not None else baseline
    return compare(
        runs,
        base,
        metric=metric or ["auto"],
        options=options,
        label=baseline,
        imprecise=imprecise,
        between_boot=profiled,
    )


def gated(comp: Comparison, rule: Rule) -> Outcome:
    """The comparison's rows judged by the gate of ``vmtax compare --fail-on/--max-overhead``."""
    return judge([{str(k): v for k, v in r.items()} for r in comp.rows.to_dict("records")], rule)


def beside_dataset(comp: Comparison, dataset: str, where: dict[str, str]) -> pd.DataFrame:
    """The comparison's rows beside a reference dataset's rows that match ``where``."""
    return beside.beside(comp.rows, dataset, where)


@dataclass(frozen=True)
class Recomputed:
    """A reference table beside its recomputation (``wide``) and every derived cell checked
    (``checked``: status ok, misprint or truncated, with the range its inputs allow)."""

    wide: pd.DataFrame
    checked: pd.DataFrame


def recomputed(dataset: str) -> Recomputed:
    """Recompute a study-A reference dataset's derived columns from its own inputs."""
    df = datasets.load_studya(dataset)
    return Recomputed(recompute.side_by_side(df), recompute.check(df))

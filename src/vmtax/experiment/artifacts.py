"""The artifacts use case (`vmtax artifacts`): timing artifacts in the raw samples of the
selected runs, each configuration and probe's runs as one runs x iterations matrix, tested
as one family (Holm, family-wise 1%) across every detector of every matrix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vmtax.errors import UsageError
from vmtax.store import Store
from vmtax.store.select import resolve

if TYPE_CHECKING:
    from vmtax.stats.artifacts import Artifacts


@dataclass(frozen=True)
class Found:
    """Per (configuration, probe), what the detectors found; ``tests`` is the family size."""

    results: list[tuple[str, str, Artifacts]]
    tests: int


def _matrices(
    runs: pd.DataFrame, samples: dict[int, np.ndarray]
) -> dict[tuple[str, str], np.ndarray]:
    # heavy: scipy and statsmodels, only for this command
    from vmtax.stats.artifacts import as_matrix

    out = {}
    for (config, probe), group in runs.groupby(["config", "probe"], sort=True):
        values = [samples.get(int(i), np.empty(0)) for i in group["run_id"]]
        matrix = as_matrix(values)
        if matrix.size:
            out[(str(config), str(probe))] = matrix
    return out


def find_artifacts(
    selector: str,
    *,
    baseline: str | None = None,
    resamples: int = 199,
    seed: int = 0,
    db: str | None = None,
) -> Found:
    """Run every detector on the runs ``selector`` picks; the shape test compares each with
    the ``baseline`` configuration's runs of the same probe (scoped by the selector)."""
    # heavy: scipy and statsmodels, only for this command
    from vmtax.stats.artifacts import (
        as_matrix,
        control_family,
        detect,
        family_resamples,
        tests_with_p,
    )

    if resamples < 19:
        raise UsageError("--resamples must be at least 19")
    with Store.open(db, read_only=True) as store:
        runs = store.runs([selector])
        runs = runs[runs["status"] == "ok"]
        if runs.empty:
            raise UsageError(f"no completed runs match {selector!r} in {store.url_display}")
        base_runs = pd.DataFrame()
        if baseline:
            # The selector scopes the baseline, as in compare and report (one resolver).
            resolved = resolve(store, [selector], baseline)
            assert resolved.baseline_mask is not None
            base_runs = resolved.runs[resolved.baseline_mask]
        ids = [int(i) for i in pd.concat([runs["run_id"], base_runs.get("run_id", pd.Series())])]
        samples = store.samples(ids)
    found = _matrices(runs, samples)
    if not found:
        raise UsageError(f"the runs matching {selector!r} have no stored samples")
    base = _matrices(base_runs, samples) if baseline else {}
    results = []
    jobs = {}
    for (config, probe), matrix in found.items():
        ref = [m for (c, p), m in base.items() if p == probe and c != config]
        jobs[(config, probe)] = (
            matrix,
            as_matrix([row for m in ref for row in m]) if ref else None,
        )
    # One family: every test of every (probe, config) this command looks at that can give a
    # p-value.
    family = sum(tests_with_p(m, b) for m, b in jobs.values())
    resamples = max(resamples, family_resamples(family))
    for (config, probe), (matrix, ref_matrix) in jobs.items():
        results.append(
            (
                config,
                probe,
                detect(matrix, ref_matrix, resamples=resamples, seed=seed, family=family),
            )
        )
    tests = control_family([a for _, _, a in results])
    return Found(results, tests)

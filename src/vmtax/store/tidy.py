"""Runs and samples of a store as tidy pandas frames: the shape of the notebook API
(``vmtax.api``) and of every export (``vmtax.store.export``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vmtax.store.store import Store

LABEL_PREFIX = "label_"
SAMPLE_COLUMNS = [
    "experiment_id", "config", "level", "probe", "run_id", "plan_index", "run_index",
    "iteration", "warmup", "value", "unit",
]  # fmt: skip


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """A runs frame with the ``labels`` dicts spread into ``label_<key>`` columns."""
    keys = sorted({k for labels in runs["labels"] for k in labels})
    out = runs.drop(columns=["labels"])
    for key in keys:
        out[LABEL_PREFIX + key] = [labels.get(key) for labels in runs["labels"]]
    return out


def tidy_samples(store: Store, runs: pd.DataFrame, *, warmup: bool = False) -> pd.DataFrame:
    """Long frame of every sample of ``runs`` (columns ``SAMPLE_COLUMNS``)."""
    run_ids = runs["run_id"].to_numpy()
    measured = store.samples(run_ids)
    warm = store.samples(run_ids, warmup=True) if warmup else {}
    # One block per (run, kind): per-block values are repeated over the block's samples, so
    # building 10^7 rows costs a few vectorised passes and no per-row Python.
    rows: list[int] = []
    arrays: list[np.ndarray] = []
    warm_flags: list[bool] = []
    for pos, run_id in enumerate(run_ids):
        if warmup and len(warm.get(int(run_id), ())):
            rows.append(pos)
            arrays.append(warm[int(run_id)])
            warm_flags.append(True)
        rows.append(pos)
        arrays.append(measured.get(int(run_id), np.empty(0)))
        warm_flags.append(False)
    block_row = np.asarray(rows, dtype=np.int64)
    sizes = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    is_warm = np.asarray(warm_flags, dtype=bool)

    def per_block(column: str, dtype: type) -> np.ndarray:
        return np.repeat(runs[column].to_numpy(dtype=dtype)[block_row], sizes)

    # Measured iterations count 0..n-1; warm-up ones -w..-1, so sorting gives run order.
    iteration = (
        np.concatenate(
            [np.arange(-n if w else 0, 0 if w else n, dtype=np.int32)
             for n, w in zip(sizes, is_warm, strict=True)]
        )
        if len(arrays)
        else np.empty(0, dtype=np.int32)
    )  # fmt: skip
    values = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.float64)
    frame = {
        "experiment_id": per_block("experiment_id", np.int64),
        "config": _categorical(runs["config"], block_row, sizes),
        "level": _categorical(runs["level"], block_row, sizes),
        "probe": _categorical(runs["probe"], block_row, sizes),
        "run_id": per_block("run_id", np.int64),
        "plan_index": per_block("plan_index", np.int32),
        "run_index": per_block("run_index", np.int32),
        "iteration": iteration,
        "warmup": np.repeat(is_warm, sizes),
        "value": values.astype(np.float64, copy=False),
        "unit": _categorical(runs["unit"], block_row, sizes),
    }
    # copy=False: no consolidation of same-typed columns into one 2-D block (a full copy).
    return pd.DataFrame(frame, columns=SAMPLE_COLUMNS, copy=False)


def _categorical(column: pd.Series, block_row: np.ndarray, sizes: np.ndarray) -> pd.Categorical:
    # Categories keep 10^7-row frames small and fast to build: one small code per row.
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    small = np.int8 if len(uniques) < 127 else np.int16 if len(uniques) < 32767 else np.int32
    per_row = np.repeat(codes.astype(small)[block_row], sizes)
    return pd.Categorical.from_codes(per_row, categories=pd.Index(list(uniques)), validate=False)

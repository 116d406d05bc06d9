"""Exports of runs and samples as CSV, JSON or Parquet, in the tidy shape of ``vmtax.api``.

Floats are written so they read back bit for bit: Parquet stores float64 as is, CSV and JSON
use Python's shortest round-tripping repr.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError, VmtaxError
from vmtax.store.store import Store

FORMATS = ("csv", "json", "parquet")
_JSON_CHUNK = 100_000


def export_runs(store: Store, selectors: Sequence[str], fmt: str, path: str | Path) -> int:
    """Write the selected runs (one row each, labels as ``label_<key>``); returns the count."""
    from vmtax.api import tidy_runs

    _check_format(fmt)
    return _write(tidy_runs(store.runs(selectors)), fmt, path)


def export_samples(
    store: Store,
    selectors: Sequence[str],
    fmt: str,
    path: str | Path,
    *,
    warmup: bool = False,
) -> int:
    """Write every sample of the selected runs (one row per iteration); returns the count."""
    from vmtax.api import tidy_samples

    _check_format(fmt)
    return _write(tidy_samples(store, store.runs(selectors), warmup=warmup), fmt, path)


def export(store: Store, experiment_id: int, fmt: str, path: str | Path) -> str:
    """Export one experiment: its runs to ``path`` and its samples beside it.

    The samples go to ``<stem>.samples<suffix>`` (e.g. ``runs.samples.parquet``), one row per
    iteration with warm-up rows marked. Returns what was written, for the user.
    """
    _check_format(fmt)
    selector = [f"exp={int(experiment_id)}"]
    n_runs = export_runs(store, selector, fmt, path)
    if str(path) == "-":
        return f"{n_runs} runs"
    target = Path(path)
    samples_path = target.with_name(f"{target.stem}.samples{target.suffix or '.' + fmt}")
    n_samples = export_samples(store, selector, fmt, samples_path, warmup=True)
    return f"{target} ({n_runs} runs) and {samples_path} ({n_samples} samples)"


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")


def _write(df: pd.DataFrame, fmt: str, path: str | Path) -> int:
    try:
        with _open(path, binary=fmt == "parquet") as out:
            if fmt == "parquet":
                df.to_parquet(out, index=False, engine="pyarrow")
            elif fmt == "csv":
                df.to_csv(out, index=False, lineterminator="\n")
            else:
                _write_json(df, out)
    except OSError as exc:
        raise VmtaxError(f"cannot write {path}: {exc.strerror or exc}") from None
    return len(df)


@contextmanager
def _open(path: str | Path, *, binary: bool) -> Iterator[IO[Any]]:
    if str(path) == "-":
        yield sys.stdout.buffer if binary else sys.stdout
        return
    target = Path(path)
    with target.open("wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
        yield fh


def _write_json(df: pd.DataFrame, out: IO[str]) -> None:
    # A JSON array of objects, written in chunks so 10^7 samples do not need 10^7 dicts.
    out.write("[")
    first = True
    columns = list(df.columns)
    for start in range(0, len(df), _JSON_CHUNK):
        part = df.iloc[start : start + _JSON_CHUNK]
        cols = [_plain(part[c]) for c in columns]
        for row in zip(*cols, strict=True):
            out.write("\n" if first else ",\n")
            out.write(json.dumps(dict(zip(columns, row, strict=True)), allow_nan=False))
            first = False
    out.write("\n]\n")


def _plain(column: pd.Series) -> list[Any]:
    values = column.astype(object).tolist()
    return [_scalar(v) for v in values]


def _scalar(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value

"""Exports of runs and samples as CSV, JSON or Parquet, in the tidy shape of ``vmtax.api``.

Floats are written so they read back bit for bit: Parquet stores float64 as is, CSV and JSON
use Python's shortest round-tripping repr.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from vmtax import outfile
from vmtax.errors import UsageError, VmtaxError
from vmtax.store.store import Store
from vmtax.store.tidy import tidy_runs, tidy_samples

FORMATS = ("csv", "json", "parquet")
_JSON_CHUNK = 100_000


def export_runs(store: Store, selectors: Sequence[str], fmt: str, path: str | Path) -> int:
    """Write the selected runs (one row each, labels as ``label_<key>``); returns the count."""
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
    _check_format(fmt)
    return _write(tidy_samples(store, store.runs(selectors), warmup=warmup), fmt, path)


#: Bytes one sample row takes in each format, for the estimate: measured on the export of a
#: two-level quick experiment (8.3 million samples: 800 MB as CSV, 40 MB as Parquet; JSON
#: repeats every column name in every row).
BYTES_PER_SAMPLE = {"json": 240.0, "csv": 96.0, "parquet": 4.8}
_SAMPLES_PER_CHUNK = 1_000_000  # rows built and written at a time (progress, bounded memory)


def samples_path(path: str | Path, fmt: str) -> Path:
    """Where :func:`export` puts the samples: ``<stem>.samples<suffix>`` beside ``path``."""
    target = Path(path)
    return target.with_name(f"{target.stem}.samples{target.suffix or '.' + fmt}")


def estimate(store: Store, experiment_id: int, fmt: str) -> tuple[int, float]:
    """(measured samples, estimated bytes of their rows in ``fmt``) of one experiment, read
    from the run summaries before anything is written (warm-up rows add a little)."""
    _check_format(fmt)
    runs = store.runs([f"exp={int(experiment_id)}"])
    n = int(pd.to_numeric(runs["n"], errors="coerce").fillna(0).sum()) if len(runs) else 0
    return n, n * BYTES_PER_SAMPLE[fmt]


def export(
    store: Store,
    experiment_id: int,
    fmt: str,
    path: str | Path,
    *,
    samples: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> str:
    """Export one experiment: its runs (one row each) to ``path``, and its raw samples (one
    row per iteration, warm-up rows marked) beside it in ``<stem>.samples<suffix>``.

    ``samples`` None means: with Parquet (compact, a few bytes a sample), yes; with CSV and
    JSON (tens to hundreds of bytes a sample), no, unless asked for. ``progress(done, total)``
    is called as samples are written. Returns what was written, for the user.
    """
    _check_format(fmt)
    selector = [f"exp={int(experiment_id)}"]
    n_runs = export_runs(store, selector, fmt, path)
    with_samples = fmt == "parquet" if samples is None else samples
    if str(path) == "-" or not with_samples:
        return str(path) + f" ({n_runs} runs)" if str(path) != "-" else f"{n_runs} runs"
    out = samples_path(path, fmt)
    n_samples = _write_samples_chunked(store, store.runs(selector), fmt, out, progress)
    return f"{path} ({n_runs} runs) and {out} ({n_samples} samples)"


def _write_samples_chunked(
    store: Store,
    runs: pd.DataFrame,
    fmt: str,
    path: Path,
    progress: Callable[[int, int], None] | None,
) -> int:
    """Every sample of ``runs``, built and appended a chunk of runs at a time."""
    sizes = pd.to_numeric(runs["n"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    total = int(sizes.sum())
    chunks: list[list[int]] = [[]]
    acc = 0
    for pos, size in enumerate(sizes):
        if acc >= _SAMPLES_PER_CHUNK:
            chunks.append([])
            acc = 0
        chunks[-1].append(pos)
        acc += int(size)
    written = 0
    try:
        with _open(path, binary=fmt == "parquet") as fh:
            writer = None
            for i, part in enumerate(chunks):
                df = tidy_samples(store, runs.iloc[part], warmup=True)
                if fmt == "parquet":
                    # heavy: pyarrow's Parquet writer, only for Parquet exports
                    import pyarrow as pa
                    import pyarrow.parquet as pq

                    table = pa.Table.from_pandas(df, preserve_index=False)
                    if writer is None:
                        writer = pq.ParquetWriter(fh, table.schema)
                    writer.write_table(table.cast(writer.schema))
                elif fmt == "csv":
                    df.to_csv(fh, index=False, header=i == 0, lineterminator="\n")
                else:
                    _write_json(df, fh, first_chunk=i == 0, last_chunk=i == len(chunks) - 1)
                written += len(df)
                if progress:
                    progress(min(written, total), total)
            if writer is not None:
                writer.close()
    except OSError as exc:
        raise VmtaxError(f"cannot write {path}: {exc.strerror or exc}") from None
    return written


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
    # Written whole or not at all, to a regular file (or a symlink's target): see outfile.
    with outfile.open_output(path, binary=binary) as fh:
        yield fh


def _write_json(
    df: pd.DataFrame, out: IO[str], *, first_chunk: bool = True, last_chunk: bool = True
) -> None:
    # A JSON array of objects, written in chunks so 10^7 samples do not need 10^7 dicts; a
    # frame may be one chunk of a longer array (first_chunk / last_chunk).
    if first_chunk:
        out.write("[")
    first = first_chunk
    columns = list(df.columns)
    for start in range(0, len(df), _JSON_CHUNK):
        part = df.iloc[start : start + _JSON_CHUNK]
        cols = [_plain(part[c]) for c in columns]
        for row in zip(*cols, strict=True):
            out.write("\n" if first else ",\n")
            out.write(json.dumps(dict(zip(columns, row, strict=True)), allow_nan=False))
            first = False
    if last_chunk:
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

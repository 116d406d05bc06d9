"""Exports of runs and samples as CSV, JSON or Parquet, in the tidy shape of ``vmtax.api``.

Floats are written so they read back bit for bit: Parquet stores float64 as is, CSV and JSON
use Python's shortest round-tripping repr.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
    """Write the selected runs (one row each, labels as ``label_<key>``, with their start and
    end times); returns the count."""
    _check_format(fmt)
    return _write(runs_with_times(store, store.runs(selectors)), fmt, path)


def runs_with_times(store: Store, runs: pd.DataFrame) -> pd.DataFrame:
    """``tidy_runs`` of ``runs`` and each run's ``started_at`` and ``ended_at`` (UTC; empty
    for runs stored before vmtax recorded times)."""
    out = tidy_runs(runs)
    when: dict[str, dict[int, Any]] = {"started_at": {}, "ended_at": {}}
    for exp in pd.unique(runs["experiment_id"]):
        order = store.executed_order(int(exp))
        for column, found in when.items():
            found.update(zip(order["run_id"].astype(int), order[column], strict=True))
    for column, found in when.items():
        stamps = [found.get(int(r), pd.NaT) for r in out["run_id"]]
        out[column] = pd.Series(pd.to_datetime(stamps, utc=True), index=out.index)
    return out


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
#: Bytes one run row takes, rounded up from a synthetic store's export (283 as CSV, 677 as
#: JSON, 509 as Parquet, whose few rows carry its metadata); real labels are longer.
BYTES_PER_RUN = {"json": 1000.0, "csv": 400.0, "parquet": 600.0}
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
) -> Exported:
    """Export one experiment: its runs (one row each) to ``path``, and its raw samples (one
    row per iteration, warm-up rows marked) beside it in ``<stem>.samples<suffix>``.

    ``samples`` None means: with Parquet (compact, a few bytes a sample), yes; with CSV and
    JSON (tens to hundreds of bytes a sample), no, unless asked for. ``path`` ``-`` is
    stdout, which carries one table, the runs: samples there are refused (UsageError).
    The estimated size is checked against the free space first (VmtaxError), and the runs
    and samples files appear together, whole, or not at all. ``progress(done, total)`` is
    called as samples are written.
    """
    _check_format(fmt)
    to_stdout = str(path) == "-"
    if to_stdout and samples:
        raise UsageError(
            "--samples needs -o FILE: stdout carries one table, the runs; the samples go "
            "beside FILE as <stem>.samples<suffix>"
        )
    with_samples = (fmt == "parquet" if samples is None else samples) and not to_stdout
    selector = [f"exp={int(experiment_id)}"]
    runs = store.runs(selector)
    n_samples, samples_bytes = estimate(store, experiment_id, fmt)
    if to_stdout:
        n_runs = _write(runs_with_times(store, runs), fmt, path)
        return Exported(n_runs, None, 0, 0)
    out = samples_path(path, fmt)
    need = len(runs) * BYTES_PER_RUN[fmt] + (samples_bytes if with_samples else 0.0)
    check_room(outfile.destination(path).parent, need)
    binary = fmt == "parquet"
    try:
        with outfile.open_outputs([path, out] if with_samples else [path], binary=binary) as fhs:
            n_runs = _write_frame(runs_with_times(store, runs), fmt, fhs[0])
            measured = warm = 0
            if with_samples:
                measured, warm = _write_samples_chunked(store, runs, fmt, fhs[1], progress)
    except OSError as exc:
        both = f"{path} and {out}" if with_samples else str(path)
        raise VmtaxError(
            f"cannot write {both}: {exc.strerror or exc}; nothing was written"
        ) from None
    return Exported(n_runs, out if with_samples else None, measured, warm)


@dataclass
class Exported:
    """What :func:`export` wrote: the run rows, and the samples file with its measured and
    warm-up rows (None and 0 without samples)."""

    runs: int
    samples_file: Path | None
    samples: int
    warmup: int


def check_room(directory: Path, need: float) -> None:
    """VmtaxError when ``directory``'s file system has less free space than ``need`` bytes
    (an estimate: refused before anything is written, not half way)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return  # nothing to say about room here; the write itself will say what fails
    if st.f_flag & os.ST_RDONLY:  # no free blocks to report there: the cause is the mount
        raise VmtaxError(
            f"{directory} is on a read-only file system (EROFS): nothing can be written "
            "there; nothing was written"
        )
    free = st.f_bavail * st.f_frsize
    if free < need:
        _can_write_in(directory)  # /proc, a read-only mount: 0 B free, but that is not why
        raise VmtaxError(
            f"not enough room in {directory}: the export needs about {human_bytes(need)}, "
            f"{human_bytes(free)} is free; nothing was written"
        )


def _can_write_in(directory: Path) -> None:
    """VmtaxError naming the real cause when no file can be made in ``directory`` at all
    (EROFS, EACCES, a pseudo file system such as /proc), which statvfs reports as no room."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, "")
        raise VmtaxError(
            f"cannot write in {directory}: {exc.strerror or exc}{f' ({code})' if code else ''}; "
            "nothing was written"
        ) from None


def human_bytes(n: float) -> str:
    """A size in decimal units, as the export's estimate and its refusal print it."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def _write_samples_chunked(
    store: Store,
    runs: pd.DataFrame,
    fmt: str,
    fh: IO[Any],
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    """Every sample of ``runs`` to ``fh``, built and appended a chunk of runs at a time;
    returns the measured and the warm-up rows written."""
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
    measured = warm = 0
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
            write_json(df, fh, first_chunk=i == 0, last_chunk=i == len(chunks) - 1)
        n_warm = int(df["warmup"].sum())
        warm += n_warm
        measured += len(df) - n_warm
        if progress:
            progress(min(measured, total), total)
    if writer is not None:
        writer.close()
    return measured, warm


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")


def _write(df: pd.DataFrame, fmt: str, path: str | Path) -> int:
    try:
        with _open(path, binary=fmt == "parquet") as out:
            _write_frame(df, fmt, out)
    except OSError as exc:
        raise VmtaxError(f"cannot write {path}: {exc.strerror or exc}") from None
    return len(df)


def _write_frame(df: pd.DataFrame, fmt: str, out: IO[Any]) -> int:
    if fmt == "parquet":
        df.to_parquet(out, index=False, engine="pyarrow")
    elif fmt == "csv":
        df.to_csv(out, index=False, lineterminator="\n")
    else:
        write_json(df, out)
    return len(df)


@contextmanager
def _open(path: str | Path, *, binary: bool) -> Iterator[IO[Any]]:
    if str(path) == "-":
        yield sys.stdout.buffer if binary else sys.stdout
        return
    # Written whole or not at all, to a regular file (or a symlink's target): see outfile.
    with outfile.open_output(path, binary=binary) as fh:
        yield fh


def write_json(
    df: pd.DataFrame, out: IO[str], *, first_chunk: bool = True, last_chunk: bool = True
) -> None:
    """``df`` as a JSON array of objects (NaN and NaT as null, times in ISO 8601)."""
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

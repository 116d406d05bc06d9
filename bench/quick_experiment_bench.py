"""What a two-level quick experiment costs after the run: the report, the export and the
store's bytes per sample, each beside a peer measured in the same run.

- Report: `vmtax report` (statistics, artifacts, figures, HTML) beside `vmtax compare` on the
  same experiment (the statistics a report cannot do without), and its stage times.
- Export: `vmtax results export` (Parquet, every sample; CSV, run-level) beside pandas writing
  the same tidy sample frame to Parquet in one call.
- Store: bytes per stored sample with the store's codec, beside raw float64 (8 bytes) and
  beside delta / offset + zstd encodings of the same arrays (the candidates for a new codec).

The experiment is either given (--db URL, --exp ID) or measured first with
`vmtax run --levels L0,L1 --runs N` (an emulated L1 guest: a few minutes).

Run: python bench/quick_experiment_bench.py [--db URL --exp ID] [--runs 7] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zstandard

VMTAX = [sys.executable, "-c", "from vmtax.cli import main; main()"]


def timed(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([*VMTAX, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def report_stages(db: str, exp: int, out: Path) -> dict[str, float]:
    """Seconds from the start of the report to the start of each step."""
    from vmtax.report import write_report
    from vmtax.store import Store

    start = time.perf_counter()
    marks: dict[str, float] = {}
    with Store.open(db) as store:
        write_report(
            store,
            [f"exp={exp}"],
            out,
            progress=lambda step: marks.setdefault(step, time.perf_counter() - start),
        )
    marks["done"] = time.perf_counter() - start
    return marks


def shuffle(raw: bytes, width: int) -> bytes:
    return np.frombuffer(raw, np.uint8).reshape(-1, width).T.tobytes()


def candidate_bytes(values: np.ndarray) -> dict[str, int]:
    """Sizes of one array under the candidate encodings (integer-valued arrays get the
    integer ones; others fall back to a byte shuffle of the float64s)."""
    zstd = zstandard.ZstdCompressor(level=9)
    out = {"float64 shuffle + zstd": len(zstd.compress(shuffle(values.tobytes(), 8)))}
    out["delta + zstd"] = out["offset + zstd"] = out["float64 shuffle + zstd"]
    integral = np.isfinite(values).all() and (values == np.round(values)).all()
    if integral and np.abs(values).max(initial=0) < 2**53:
        ints = values.astype(np.int64)
        delta = np.diff(ints, prepend=0)
        zigzag = ((delta << 1) ^ (delta >> 63)).astype(np.uint64)
        out["delta + zstd"] = len(zstd.compress(shuffle(zigzag.tobytes(), 8)))
        out["offset + zstd"] = len(zstd.compress(shuffle((ints - ints.min()).tobytes(), 8)))
    return out


def store_bytes(db: str, exp: int) -> None:
    from sqlalchemy import select

    from vmtax.store import Store, codec
    from vmtax.store.models import Run, SampleBlock

    t, r = SampleBlock.__table__, Run.__table__
    stmt = (
        select(t.c.codec, t.c.count, t.c.data)
        .join(r, r.c.id == t.c.run_id)
        .where(r.c.experiment_id == exp, t.c.kind == "measured")
    )
    with Store.open(db) as store, store.engine.connect() as conn:
        blocks = conn.execute(stmt).all()
    n = sum(int(c) for _, c, _ in blocks)
    stored = sum(len(d) for _, _, d in blocks)
    sizes: dict[str, int] = {}
    for cdc, count, data in blocks:
        for name, size in candidate_bytes(codec.decode(codec.DTYPE, cdc, int(count), data)).items():
            sizes[name] = sizes.get(name, 0) + size
    print(
        f"store: {n:,} samples; {stored / n:.2f} bytes/sample with {codec.CODEC} "
        f"(raw float64: 8.00, ratio {8 * n / stored:.1f}x)"
    )
    for name, size in sizes.items():
        print(f"  candidate {name}: {size / n:.2f} bytes/sample ({stored / size:.2f}x the store's)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a store with the experiment (default: measure one)")
    parser.add_argument("--exp", type=int, help="its experiment id (with --db)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="report/compare rounds")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmtax-quick-bench-") as tmp:
        work = Path(tmp)
        db, exp = opts.db, opts.exp
        if db is None:
            db = f"sqlite:///{work / 'bench.db'}"
            took = timed(["run", "--levels", "L0,L1", "--runs", str(opts.runs), "--db", db], work)
            exp = 1
            print(f"vmtax run --levels L0,L1 --runs {opts.runs}: {took:.1f} s")
        assert exp is not None, "--exp is needed with --db"
        # Alternate rounds: the machine's load drifts, and both sides should see the same.
        compare_t, report_t = [], []
        for _ in range(opts.rounds):
            compare_t.append(
                timed(["compare", f"exp={exp}", "--baseline", "level=L0", "--db", db], work)
            )
            report_t.append(
                timed(["report", f"exp={exp}", "-o", str(work / "r.html"), "--db", db], work)
            )
        report_s, compare_s = statistics.median(report_t), statistics.median(compare_t)
        print(
            f"report: median {report_s:.1f} s (min {min(report_t):.1f}, max {max(report_t):.1f}); "
            f"compare of the same data: median {compare_s:.1f} s (min {min(compare_t):.1f}, "
            f"max {max(compare_t):.1f}); ratio of medians {report_s / compare_s:.1f}x "
            f"over {opts.rounds} alternating rounds"
        )
        stages = report_stages(db, exp, work / "r2.html")
        print(
            "  report steps (s from start): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
        )
        parquet_s = timed(
            ["results", "export", str(exp), "-o", str(work / "x.parquet"), "--db", db], work
        )
        csv_s = timed(
            [
                "results",
                "export",
                str(exp),
                "--format",
                "csv",
                "-o",
                str(work / "x.csv"),
                "--db",
                db,
            ],
            work,
        )
        from vmtax.api import tidy_samples
        from vmtax.store import Store

        t0 = time.perf_counter()
        with Store.open(db) as store:
            tidy_samples(store, store.runs([f"exp={exp}"]), warmup=True).to_parquet(
                work / "peer.parquet", index=False
            )
        peer_s = time.perf_counter() - t0
        size = (work / "x.samples.parquet").stat().st_size
        print(
            f"export: parquet with every sample {parquet_s:.1f} s ({size / 1e6:.1f} MB), "
            f"csv run-level {csv_s:.1f} s; pandas to_parquet of the same frame "
            f"{peer_s:.1f} s (ratio {parquet_s / peer_s:.1f}x, incl. the CLI's start)"
        )
        store_bytes(db, exp)


if __name__ == "__main__":
    main()

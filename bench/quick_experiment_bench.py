"""What a two-level quick experiment costs after the run: the report, the export and the
store's bytes per sample, each beside a peer measured in the same run.

- Report: `vmtax report` (statistics, artifacts, figures, HTML) beside `vmtax compare` on the
  same experiment (the statistics a report cannot do without), and its stage times.
- Export: `vmtax results export` (Parquet, every sample; CSV, run-level) beside pandas writing
  the same tidy sample frame to Parquet in one call.
- Store: bytes per stored sample with the store's codec, beside raw float64 (8 bytes) and
  beside delta / offset + zstd encodings of the same arrays (the candidates for a new codec).

The experiment is either given (--db URL, --exp ID) or measured first with
`vmtax run --levels L0,L1 --runs N` (an emulated L1 guest: a few minutes), or with the
README's worked example as written (`--runs 0`: adaptive sampling), timed without its report
(`VMTAX_RUN_REPORT=none`: at a terminal the report is written after the run returns).

`--stress` times everything twice per round, quiet and beside `stress-ng --cpu <cores>`, in
alternating order (the machine's own load drifts; both sides should see the same), and also
gives the CPU seconds each command used (less sensitive to load than its wall time).

Run: python bench/quick_experiment_bench.py [--db URL --exp ID] [--runs 7] [--rounds 3]
     [--stress] [--run-rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zstandard

VMTAX = [sys.executable, "-c", "from vmtax.cli import main; main()"]


def timed(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    return timed_cpu(args, cwd, env)[0]


def timed_cpu(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, its worker processes included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([*VMTAX, *args], cwd=cwd, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@contextlib.contextmanager
def load(kind: str) -> Iterator[None]:
    """Nothing more (quiet), or stress-ng keeping every core busy beside the command."""
    if kind == "quiet":
        yield
        return
    cores = str(len(os.sched_getaffinity(0)))
    hog = subprocess.Popen(["stress-ng", "--cpu", cores, "--timeout", "3600", "--quiet"])
    try:
        time.sleep(1.0)  # its workers are running
        yield
    finally:
        hog.terminate()
        hog.wait()


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.1f} s (min {min(values):.1f}, "
        f"max {max(values):.1f}, n={len(values)})"
    )


def report_stages(db: str, exp: int, out: Path) -> dict[str, float]:
    """Seconds from the start of the report to the start of each step."""
    from vmtax.experiment.report import write_report
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
    parser.add_argument("--runs", type=int, default=7, help="0: adaptive, as the README")
    parser.add_argument("--rounds", type=int, default=3, help="report/compare rounds")
    parser.add_argument("--stress", action="store_true", help="each round also beside stress-ng")
    parser.add_argument("--run-rounds", type=int, default=1, help="runs measured per load")
    opts = parser.parse_args()
    loads = ["quiet", "stress"] if opts.stress else ["quiet"]
    with tempfile.TemporaryDirectory(prefix="vmtax-quick-bench-") as tmp:
        work = Path(tmp)
        db, exp = opts.db, opts.exp
        if db is None:
            db = f"sqlite:///{work / 'bench.db'}"
            args = ["run", "--levels", "L0,L1", "--db", db]
            args += ["--runs", str(opts.runs)] if opts.runs else []
            env = {**os.environ, "VMTAX_RUN_REPORT": "none"}
            runs: dict[str, list[float]] = {kind: [] for kind in loads}
            for i in range(opts.run_rounds):
                for kind in loads if i % 2 == 0 else loads[::-1]:
                    with load(kind):
                        runs[kind].append(timed(args, work, env))
            exp = 1
            shown = " ".join(["vmtax", *args[:3], *args[5:]])
            for kind, took in runs.items():
                print(f"{shown} ({kind}, without its report): {spread(took)}")
        assert exp is not None, "--exp is needed with --db"
        report_args = ["report", f"exp={exp}", "--baseline", "level=L0", "-o",
                       str(work / "r.html"), "--db", db]  # fmt: skip
        compare_args = ["compare", f"exp={exp}", "--baseline", "level=L0", "--db", db]
        # Alternate rounds and loads: the machine's load drifts, and every side should see
        # the same.
        for_load: dict[str, dict[str, list[float]]] = {
            kind: {"report": [], "report_cpu": [], "compare": [], "compare_cpu": []}
            for kind in loads
        }
        for i in range(opts.rounds):
            for kind in loads if i % 2 == 0 else loads[::-1]:
                with load(kind):
                    got = for_load[kind]
                    wall, cpu = timed_cpu(compare_args, work)
                    got["compare"].append(wall)
                    got["compare_cpu"].append(cpu)
                    wall, cpu = timed_cpu(report_args, work)
                    got["report"].append(wall)
                    got["report_cpu"].append(cpu)
        for kind, got in for_load.items():
            report_s = statistics.median(got["report"])
            compare_s = statistics.median(got["compare"])
            print(
                f"report ({kind}): {spread(got['report'])}, CPU {spread(got['report_cpu'])}; "
                f"compare of the same data: {spread(got['compare'])}, CPU "
                f"{spread(got['compare_cpu'])}; ratio of medians {report_s / compare_s:.1f}x"
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

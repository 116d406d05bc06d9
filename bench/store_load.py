"""Ingest and load 10^7 stored samples: ``Store.add_run`` (samples/s), ``Store.samples`` and
``vmtax.open().samples()``, and (``--compare``) `vmtax compare` of that experiment.

Budgets: loading <= 2 s; `vmtax compare` of a 10^7-sample experiment read from PostgreSQL
<= 10 s. Timings are printed next to peers measured in the same run: writing / reading the
same values as one uncompressed ``.npy`` file (the floor for moving the bytes) and one
Parquet file, and, for compare, `vmtax --help` (the interpreter and import start-up).

The experiment has two configurations (L0, L1), like a real comparison.

    python bench/store_load.py                      # SQLite in a temporary directory
    python bench/store_load.py --db postgresql://USER:PASSWORD@127.0.0.1/DB --compare
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import vmtax.api
from vmtax.store import Store


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="store URL (default: a new SQLite file in a temp dir)")
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", action="store_true", help="also time `vmtax compare`")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        rng = np.random.default_rng(0)
        per_run = args.samples // args.runs
        store = Store.open(url)
        exp = store.create_experiment(command=["bench"], suite="bench", seed=0, plan={},
                                      vmtax_version="bench", agent_version=None)  # fmt: skip
        cfgs = [
            store.configuration(experiment_id=exp, level=lv, labels={}, fingerprint={},
                                target="local", provenance={})
            for lv in ("L0", "L1")
        ]  # fmt: skip
        header = {"unit": "cycles", "better": "lower"}
        all_values = []
        t0 = time.perf_counter()
        run_ids = []
        for i in range(args.runs):
            # cycle counts: integer-valued with a long tail, like the cpuid probe's output
            level = i % 2  # L1 runs cost about 20 % more, as a guest's would
            v = np.round(rng.normal(9000 * (1 + 0.2 * level), 300, per_run)
                         + rng.exponential(200, per_run))  # fmt: skip
            all_values.append(v)
            summary = {"n": per_run, "mean": float(v.mean()), "median": float(np.median(v)),
                       "stddev": float(v.std(ddof=1)), "min": float(v.min()),
                       "max": float(v.max())}  # fmt: skip
            run_ids.append(store.add_run(
                experiment_id=exp, configuration_id=cfgs[level], probe="cpuid", plan_index=i,
                run_index=0, header=header, summary=summary, values=v,
                warmup_values=v[:10], status="ok",
            ))  # fmt: skip
        write_s = time.perf_counter() - t0
        total = per_run * args.runs

        t_store, got = best_of(lambda: store.samples(run_ids), args.repeat)
        assert sum(len(a) for a in got.values()) == total
        assert all(np.array_equal(got[r], v) for r, v in zip(run_ids, all_values, strict=True))
        res = vmtax.api.open(url)
        t_api, frame = best_of(lambda: res.samples(f"exp={exp}"), args.repeat)
        assert len(frame) == total

        flat = np.concatenate(all_values)
        npy = Path(tmp) / "peer.npy"
        t0 = time.perf_counter()
        np.save(npy, flat)
        t_npy_write = time.perf_counter() - t0
        t_npy, _ = best_of(lambda: np.load(npy), args.repeat)
        pq = Path(tmp) / "peer.parquet"
        t0 = time.perf_counter()
        pd.DataFrame({"value": flat}).to_parquet(pq)
        t_pq_write = time.perf_counter() - t0
        t_cmp = t_help = None
        if args.compare:
            cli = [sys.executable, "-c", "from vmtax.cli import main; main()"]
            env = {k: v for k, v in os.environ.items() if k != "VMTAX_DB"}

            def compare_cli():
                subprocess.run([*cli, "compare", f"exp={exp}", "--baseline", "level=L0",
                                "--db", url], check=True, capture_output=True, env=env)  # fmt: skip

            t_cmp, _ = best_of(compare_cli, 1)
            t_help, _ = best_of(
                lambda: subprocess.run([*cli, "--help"], check=True, capture_output=True, env=env),
                1,
            )
        t_pq, _ = best_of(lambda: pd.read_parquet(pq), args.repeat)
        info = store.info()
        size = Path(url.removeprefix("sqlite:///")).stat().st_size if url.startswith(
            "sqlite") else None  # fmt: skip
        res.close()
        store.close()

    print(f"store: {res.url}")
    print(f"samples: {total:,} in {args.runs} runs ({info['counts']['samples']} sample blocks)")
    if size:
        print(f"database size: {size / 2**20:.1f} MiB ({size / (total * 8):.2f} of raw float64)")
    print(f"ingest (add_run x {args.runs}): {write_s:.2f} s = {total / write_s:,.0f} samples/s")
    print(f"  ({write_s / t_npy_write:.1f}x np.save, {write_s / t_pq_write:.1f}x to_parquet)")
    print(f"Store.samples():           {t_store:.3f} s  ({t_store / t_npy:.1f}x np.load, "
          f"{t_store / t_pq:.1f}x read_parquet)")  # fmt: skip
    print(f"vmtax.open().samples():    {t_api:.3f} s  ({t_api / t_npy:.1f}x np.load, "
          f"{t_api / t_pq:.1f}x read_parquet)")  # fmt: skip
    print(f"peer np.load (raw .npy):   {t_npy:.3f} s")
    print(f"peer pd.read_parquet:      {t_pq:.3f} s")
    print(f"budget 2 s: {'met' if max(t_store, t_api) <= 2.0 else 'MISSED'}")
    if t_cmp is not None:
        print(f"vmtax compare exp={exp} (CLI, whole process): {t_cmp:.2f} s "
              f"({t_cmp / t_help:.1f}x `vmtax --help`, {t_help:.2f} s)")  # fmt: skip
        print(f"compare budget 10 s: {'met' if t_cmp <= 10.0 else 'MISSED'}")


if __name__ == "__main__":
    main()

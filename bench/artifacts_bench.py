"""Benchmark: timing-artifact detection on one report-sized matrix.

A synthetic 10 runs x 16,667 iterations matrix (lognormal noise with every 25th iteration
twice as slow in every run: a planted period) and a baseline of the same shape without it,
as ``vmtax report`` passes them to ``vmtax.stats.artifacts.detect`` (199 resamples). Prints
the time of detect() and of each detector, and, measured in the same run as a peer, one
numpy FFT autocorrelation of the same matrix (zero-padded to 2n, every run): the ratio says
how many such passes detect() costs, whatever the machine. The permutation tests used to
cost about one such pass per resample (a ratio in the hundreds); the target is <= 50.

With ``--family T`` it also times detect() as a report of T tests calls it (the resamples
that family needs, 20,000 at most), once stopping at the early look and once drawing every
resample, alternating the two: the ratio is what the look saves on a clear period.

Run: python bench/artifacts_bench.py [--iterations N] [--runs R] [--repeats K] [--family T]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from vmtax.stats import artifacts


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def fft_acf(matrix: np.ndarray) -> np.ndarray:
    """The peer: every run's autocorrelation by one zero-padded FFT and its inverse."""
    n = matrix.shape[1]
    x = matrix - matrix.mean(axis=1, keepdims=True)
    f = np.fft.rfft(x, n=2 * n, axis=1)
    return np.fft.irfft(f * np.conj(f), n=2 * n, axis=1)[:, :n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=16_667)
    parser.add_argument("--period", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--family", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    shape = (args.runs, args.iterations)
    matrix = rng.lognormal(np.log(100), 0.05, shape)
    matrix[:, args.period - 1 :: args.period] *= 2.0
    baseline = rng.lognormal(np.log(100), 0.05, shape)

    artifacts.detect(matrix[:, :1000], baseline[:, :1000])  # imports and FFT plans, untimed
    t_detect, found = timed(lambda: artifacts.detect(matrix, baseline), args.repeats)
    t_peer, _ = timed(lambda: fft_acf(matrix), max(args.repeats, 5))
    slow, _ = artifacts.tukey(matrix, k=3.0)
    parts = {
        "periodic": lambda: artifacts.periodic(slow),
        "cross_run": lambda: artifacts.cross_run(slow),
        "warmup": lambda: artifacts.warmup(matrix),
        "shape": lambda: artifacts.shape(matrix, baseline),
    }

    assert isinstance(found, artifacts.Artifacts)
    print(f"matrix: {args.runs} runs x {args.iterations:,} iterations, period {args.period}")
    print(
        f"found: {found.found()}  period: {found.periodic.period}  p: {found.periodic.p_value:.3f}"
    )
    print(f"detect: {t_detect:.3f} s (median of {args.repeats})")
    for name, fn in parts.items():
        print(f"  {name}: {timed(fn, args.repeats)[0]:.3f} s")
    print(
        f"peer one numpy FFT autocorrelation: {t_peer * 1e3:.1f} ms  "
        f"ratio {t_detect / t_peer:.0f}x (target <= 50x)"
    )
    if args.family:
        family_look(matrix, baseline, args.family, args.repeats)


def family_look(matrix: np.ndarray, baseline: np.ndarray, family: int, repeats: int) -> None:
    """The early look against the full test, in alternating rounds (min/median/max)."""
    resamples = artifacts.family_resamples(family)
    look = artifacts.early_look(family, resamples)
    with_look, full = [], []
    for _ in range(repeats):
        with_look.append(timed(lambda: artifacts.detect(matrix, baseline, family=family), 1)[0])
        full.append(timed(lambda: artifacts.detect(matrix, baseline, resamples=resamples), 1)[0])
    ratios = sorted(f / w for f, w in zip(full, with_look, strict=True))
    print(f"family of {family}: {resamples:,} resamples, look at {look}")
    print(f"  with the look: median {statistics.median(with_look):.2f} s")
    print(f"  every resample: median {statistics.median(full):.2f} s")
    print(
        f"  full / look: min {ratios[0]:.1f}x  median {statistics.median(ratios):.1f}x  "
        f"max {ratios[-1]:.1f}x"
    )


if __name__ == "__main__":
    main()

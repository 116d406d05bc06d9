"""The store's sample codec: bytes per sample and encode/decode time, zlib against zstd.

Reads the real samples of a store (every run of its latest experiment, or ``--experiment``),
and encodes each run's measured samples with every candidate, in alternating rounds so that
machine noise falls on all of them alike. Prints per codec: bytes per sample (all runs
together), and the median, min and max over rounds of the total encode and decode time, each
also as a ratio to the plain ``zlib`` codec measured in the same round (the peer).

    python bench/codec_bench.py --db lab.db [--experiment 3] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from functools import partial

import numpy as np
import zstandard

from vmtax.store import Store


def _shuffle(arr: np.ndarray) -> bytes:
    return arr.view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(raw: bytes, n: int) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).reshape(8, n).T.copy().view("<f8").reshape(n)


_ZC = {level: zstandard.ZstdCompressor(level=level) for level in (1, 3, 9)}
_ZD = zstandard.ZstdDecompressor()


def _plain(compress, decompress):  # noqa: ANN001, ANN202 - codec pairs for the table below
    return (
        lambda a: compress(a.tobytes()),
        lambda b, n: np.frombuffer(decompress(b), "<f8"),
    )


def _shuffled(compress, decompress):  # noqa: ANN001, ANN202
    return (lambda a: compress(_shuffle(a)), lambda b, n: _unshuffle(decompress(b), n))


CODECS = {
    "zlib": _plain(partial(zlib.compress, level=1), zlib.decompress),
    "zlib-shuffle8 (level 1)": _shuffled(partial(zlib.compress, level=1), zlib.decompress),
    "zlib-shuffle8 (level 6)": _shuffled(partial(zlib.compress, level=6), zlib.decompress),
    "zstd-shuffle8 (level 1)": _shuffled(_ZC[1].compress, _ZD.decompress),
    "zstd-shuffle8 (level 3)": _shuffled(_ZC[3].compress, _ZD.decompress),
    "zstd-shuffle8 (level 9)": _shuffled(_ZC[9].compress, _ZD.decompress),
    "zstd (level 1)": _plain(_ZC[1].compress, _ZD.decompress),
    "zstd (level 3), the store's": _plain(_ZC[3].compress, _ZD.decompress),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--experiment", type=int)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    store = Store.open(args.db, read_only=True)
    exp = args.experiment or store.latest_experiment_id()
    runs = store.runs([f"exp={exp}"])
    arrays = [a for a in store.samples(runs["run_id"]).values() if a.size]
    n_total = sum(a.size for a in arrays)
    print(f"experiment {exp}: {len(arrays)} runs, {n_total:,} samples")
    sizes: dict[str, int] = {}
    enc: dict[str, list[float]] = {k: [] for k in CODECS}
    dec: dict[str, list[float]] = {k: [] for k in CODECS}
    names = list(CODECS)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]  # alternate, so drift hits all alike
        for name in order:
            encode, decode = CODECS[name]
            t0 = time.perf_counter()
            blobs = [encode(a) for a in arrays]
            t1 = time.perf_counter()
            back = [decode(b, a.size) for b, a in zip(blobs, arrays, strict=True)]
            t2 = time.perf_counter()
            assert all(np.array_equal(x, a) for x, a in zip(back, arrays, strict=True))
            sizes[name] = sum(len(b) for b in blobs)
            enc[name].append(t1 - t0)
            dec[name].append(t2 - t1)
    print(f"{'codec':26} {'B/sample':>8} {'encode ms med [min, max]':>28} {'÷zlib':>6} "
          f"{'decode ms med [min, max]':>28} {'÷zlib':>6}")  # fmt: skip
    for name in names:
        e_ratio = statistics.median(e / z for e, z in zip(enc[name], enc["zlib"], strict=True))
        d_ratio = statistics.median(d / z for d, z in zip(dec[name], dec["zlib"], strict=True))

        def span(xs: list[float]) -> str:
            return (
                f"{statistics.median(xs) * 1e3:7.1f} [{min(xs) * 1e3:6.1f}, {max(xs) * 1e3:6.1f}]"
            )

        print(f"{name:26} {sizes[name] / n_total:8.3f} {span(enc[name]):>28} {e_ratio:6.2f} "
              f"{span(dec[name]):>28} {d_ratio:6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

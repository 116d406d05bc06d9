"""Reading a saved agent stream for `vmtax import`: every record parsed and checked (samples
finite and not negative, each run's count), read through ``vmtax.infile`` as a FIFO would be.

Printed next to a peer measured in the same run on the same bytes: ``json.loads`` of every
line, which parses the records and checks nothing.

    python bench/import_read.py                   # 20 runs x 50,000 syscall samples
    python bench/import_read.py --runs 40
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from vmtax import infile
from vmtax.contract import read_stream
from vmtax.targets.base import find_agent


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stream.jsonl"
        with path.open("wb") as fh:
            subprocess.run([str(find_agent()), "run", "syscall", "--runs", str(args.runs),
                            "--iterations", str(args.iterations), "--duration", "5"],
                           stdout=fh, check=True)  # fmt: skip
        lines = path.read_bytes().splitlines(keepends=True)

        def checked() -> None:
            with infile.lines(path) as got:
                read_stream(got, keep_going=True)

        samples = sum(r.values.size for r in read_stream(lines).runs)
        ours = best_of(checked, args.repeat)
        peer = best_of(lambda: [json.loads(line) for line in lines], args.repeat)
        print(f"{samples:,} samples, {path.stat().st_size / 1e6:.1f} MB")
        print(f"import's read and check {ours:.2f} s ({samples / ours / 1e6:.2f} M samples/s); "
              f"json.loads of every line {peer:.2f} s; ratio {ours / peer:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

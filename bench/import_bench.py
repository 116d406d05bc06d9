"""`vmtax import` end to end on a big saved stream: samples a second, read, checked and stored.

The stream is the agent's own header (a short real run) followed by runs whose samples are
drawn here and written as the agent writes them (shortest round-trip floats, one samples
record per chunk of at most 4,096 values, a summary whose statistics are the samples'), so
its size is set without waiting for the agent to measure 50 M iterations. The import runs as
a user runs it, `vmtax import FILE --db sqlite:///...` in a child process pinned to one core,
and the line printed is its wall time and samples a second; its peak memory (max RSS) too.

Printed next to a peer timed in the same run on the same bytes: `wc -l`, which reads every
byte once and checks nothing.

    python bench/import_bench.py                       # about 200 MB, cpuid-like samples
    python bench/import_bench.py --mb 50 --shape ns    # ns timings with 17 digits
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vmtax.targets.base import find_agent

#: The agent writes a run's samples in records of at most this many values
#: (docs/contract.md).
CHUNK = 4096


def _header(probe: str) -> dict:
    out = subprocess.run(
        [str(find_agent()), "run", probe, "--runs", "1", "--iterations", "2", "--warmup", "0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[0])


def _values(rng: np.random.Generator, n: int, shape: str) -> np.ndarray:
    if shape == "cycles":  # cpuid: whole TSC cycles, written as 3738.0
        return np.round(rng.lognormal(8.2, 0.2, n))
    if shape == "small":  # small counts, written as 3.0: the most samples a byte
        return rng.poisson(3.0, n).astype(np.float64)
    return rng.lognormal(5.0, 0.3, n)  # ns timings with every digit


def write_stream(path: Path, mb: float, shape: str, run_samples: int, seed: int = 1) -> int:
    """A stream of about ``mb`` MB; returns its number of measured samples."""
    probe = "cpuid" if shape == "cycles" else "syscall"
    header = _header(probe)
    rng = np.random.default_rng(seed)
    total = 0
    runs = 0
    with path.open("w") as fh:
        fh.write(json.dumps(header) + "\n")
        while fh.tell() < mb * 1e6:
            v = _values(rng, run_samples, shape)
            for i in range(0, v.size, CHUNK):
                part = ",".join(map(repr, v[i : i + CHUNK].tolist()))
                fh.write(f'{{"type":"samples","run":{runs},"unit":"{header["unit"]}",'
                         f'"warmup":false,"values":[{part}]}}\n')  # fmt: skip
            summary = {
                "type": "run_summary", "run": runs, "n": int(v.size), "mean": float(v.mean()),
                "median": float(np.median(v)), "stddev": float(v.std(ddof=1)),
                "min": float(v.min()), "max": float(v.max()),
                "p95": float(np.percentile(v, 95)), "p99": float(np.percentile(v, 99)),
                "wall_s": 1.0, "ops_per_sec": None, "throughput": None, "throughput_unit": None,
                "steal_ticks": 0, "cpus": [0], "stopped_by": "iterations", "extra": {},
            }  # fmt: skip
            fh.write(json.dumps(summary) + "\n")
            total += v.size
            runs += 1
        fh.write(json.dumps({"type": "end", "status": "ok", "error": None,
                             "runs_completed": runs}) + "\n")  # fmt: skip
    # The header promised one run: say how many there are, as the agent's would.
    text = path.read_text()
    path.write_text(text.replace('"runs": 1,', f'"runs": {runs},', 1))
    return total


def timed(argv: list[str]) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MB) and the result of ``argv``
    pinned to one core. On a shared machine the CPU seconds are the rate's measure: the
    wall time also counts the other jobs the core ran."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(["taskset", "-c", "0", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--shape", choices=("cycles", "ns", "small"), default="cycles")
    ap.add_argument("--run-samples", type=int, default=500_000)
    ap.add_argument("--keep", help="also write the stream here")
    ap.add_argument("--stream", help="import this stream instead of writing one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "stream.jsonl"
        if args.stream:
            path = Path(args.stream)
            samples = sum(
                line.split(b'"values":[', 1)[1].count(b",") + 1
                for line in path.open("rb")
                if b'"warmup":false' in line and not line.rstrip().endswith(b"[]}")
            )
        else:
            samples = write_stream(path, args.mb, args.shape, args.run_samples)
        size = path.stat().st_size / 1e6
        vmtax = [sys.executable, "-c", "from vmtax.entry import main; main()"]
        env_db = f"sqlite:///{Path(tmp) / 'v.db'}"
        os.environ["VMTAX_RUN_REPORT"] = "none"
        wall, cpu, rss, done = timed([*vmtax, "import", str(path), "--db", env_db])
        if done.returncode != 0:
            sys.exit(f"import failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        if not re.search(r"^experiment \d+$", done.stdout, re.M):
            sys.exit(f"import printed no experiment: {done.stdout[-300:]}")
        peer, _, _, _ = timed(["wc", "-l", str(path)])
        shape = path.name if args.stream else f"{args.shape}, {args.run_samples:,} a run"
        print(f"{samples:,} samples ({shape}), {size:.0f} MB")
        print(f"vmtax import, one core: {cpu:.1f} CPU-s, {samples / cpu / 1e6:.2f} M samples/s "
              f"(wall {wall:.1f} s, {samples / wall / 1e6:.2f} M/s), peak RSS {rss:.0f} MB; "
              f"wc -l {peer:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()

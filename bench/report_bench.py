"""Report benchmark: a 3-level comparison with 10^6 samples behind it.

Builds a SQLite store of synthetic runs (3 levels x 2 probes x 10 runs x 16,667 iterations),
writes the HTML report, and opens it in headless Chromium. Prints the file size, the time to
generate it (statistics vs drawing), and the page load time next to a peer measured in the
same run: a plain HTML page of the same byte size (no figures), so the ratio shows what the
figures cost the browser, independent of how fast this machine is.

Run: python bench/report_bench.py [--iterations N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

# The browser's launch flags are shared with the report's browser test.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from headless_chromium import ARGS, CHROMIUM  # noqa: E402
from vmtax.report import analysis, gather, write_model
from vmtax.store import Store
from vmtax.testing.report_store import populate


def load_times(paths: list[Path], repeats: int = 3) -> dict[Path, float]:
    """Best-of-N seconds from navigation start to the load event, per page."""
    out: dict[Path, float] = {}
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS
        )
        page = ctx.new_page()
        for path in paths:
            best = float("inf")
            for _ in range(repeats):
                page.goto("about:blank")
                start = time.perf_counter()
                page.goto(path.resolve().as_uri(), wait_until="load")
                best = min(best, time.perf_counter() - start)
            out[path] = best
        ctx.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=16_667)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="write the report and store here")
    opts = parser.parse_args()
    if opts.keep:
        opts.keep.mkdir(parents=True, exist_ok=True)
        run(opts, opts.keep)
        print(f"files in {opts.keep}")
    else:
        with tempfile.TemporaryDirectory(prefix="vmtax-report-bench-") as tmp:
            run(opts, Path(tmp))


def run(opts: argparse.Namespace, work: Path) -> None:
    """Build the store, write the report and time it, all inside ``work``."""
    db = work / "bench.db"
    db.unlink(missing_ok=True)
    store = Store.open(f"sqlite:///{db}")
    t0 = time.perf_counter()
    populate(
        store,
        levels=("L0", "L1", "L2"),
        probes=("cpuid", "syscall"),
        runs=opts.runs,
        iterations=opts.iterations,
    )
    t1 = time.perf_counter()
    data = gather.load(store, ["exp=latest"], None)
    n_samples = sum(v.size for v in data.samples.values())
    t2 = time.perf_counter()
    model = analysis.build(data)
    t3 = time.perf_counter()
    report = work / "report.html"
    written = write_model(model, report)
    t4 = time.perf_counter()
    peer = work / "peer.html"
    filler = "x" * max(0, written.size - 60)
    peer.write_text(f"<!DOCTYPE html><html><body><p>{filler}</p></body></html>")
    loads = load_times([report, peer])
    print(f"samples behind the report: {n_samples:,}")
    print(f"report size: {written.size / 1e6:.2f} MB ({written.figures} figures)")
    print(
        f"store build {t1 - t0:.1f} s; load from store {t2 - t1:.1f} s; statistics and "
        f"figures {t3 - t2:.1f} s; SVG + HTML rendering {t4 - t3:.1f} s"
    )
    print(
        f"page load: report {loads[report]:.3f} s, same-size plain page {loads[peer]:.3f} s, "
        f"ratio {loads[report] / loads[peer]:.1f}x"
    )


if __name__ == "__main__":
    main()

"""CPU seconds of each command's start: this tree against another (an older checkout) and
against the interpreter's own start, in the same rounds.

Each round runs every command once per tree, in an order that alternates between rounds, and
reads each process's CPU time (user + system, from its rusage) and wall time. A bare
`python -c pass` runs in every round too: on a shared machine CPU seconds swing with the load,
and the ratio to the interpreter's own start is what carries across machines. The table gives
every command's min/median/max CPU seconds per tree, and the ratio of the medians.

Commands that read a store (compare, report) run when --db names one with an experiment in it
(the README's worked example: `vmtax run --levels L0,L1`).

Example:
    git worktree add ../before HEAD~3
    python bench/startup.py --rounds 7 --peer ../before --db sqlite:///worked.db
    python bench/startup.py --rounds 5 --db sqlite:///worked.db --only 'vmtax compare'
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
#: The console script's own code path (vmtax.entry), run from the tree's sources.
ENTRY = "from vmtax.entry import main; main()"


def commands(db: str | None, out: str) -> dict[str, list[str] | None]:
    """Each measured command line (None: the interpreter's own start)."""
    lines: dict[str, list[str] | None] = {
        "python -c pass": None,
        "vmtax --help": ["--help"],
        "vmtax --version": ["--version"],
        "vmtax run --help": ["run", "--help"],
        "vmtax compare --help": ["compare", "--help"],
        "vmtax doctor": ["doctor"],
    }
    if db:
        lines["vmtax compare"] = ["compare", "exp=latest", "--baseline", "level=L0", "--db", db]
        lines["vmtax report"] = ["report", "exp=latest", "--db", db, "--output", out]
    return lines


def one(tree: Path, argv: list[str] | None) -> tuple[float, float] | None:
    """CPU and wall seconds of one process; None when the tree lacks the command."""
    code = "pass" if argv is None else ENTRY
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, *(argv or [])], capture_output=True, text=True, env=env
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # doctor exits 1 where something is missing
        print(f"{tree}: {argv}: exit {done.returncode}: {done.stderr.strip()[-200:]}")
        return None
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--peer", type=Path, help="another checkout to measure beside this one")
    parser.add_argument("--db", help="a store with the worked example, for compare and report")
    parser.add_argument(
        "--only",
        action="append",
        metavar="LINE",
        help="measure only this command line, as the table names it (e.g. 'vmtax compare'); "
        "repeat for several (the interpreter's own start is always measured)",
    )
    args = parser.parse_args()
    trees = {"this": HERE}
    if args.peer:
        trees["peer"] = args.peer.resolve()
    for tree in trees.values():
        # Like with like: an installed vmtax has its bytecode compiled (pip does it), and a
        # tree without it (a fresh checkout, under PYTHONDONTWRITEBYTECODE) would compile
        # every module it imports in every round, about half a second of a report's start.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        lines = commands(args.db, str(Path(tmp) / "report.html"))
        if args.only:
            unknown = set(args.only) - set(lines)
            if unknown:
                parser.error(f"--only: no command line {sorted(unknown)} (known: {list(lines)})")
            lines = {k: v for k, v in lines.items() if v is None or k in args.only}
        cpu: dict[tuple[str, str], list[float]] = {}
        wall: dict[tuple[str, str], list[float]] = {}
        for round_no in range(args.rounds):
            order = list(trees.items())
            if round_no % 2:
                order.reverse()
            for label, argv in lines.items():
                for name, tree in order:
                    measured = one(tree, argv)
                    if measured is not None:
                        cpu.setdefault((label, name), []).append(measured[0])
                        wall.setdefault((label, name), []).append(measured[1])
    print(f"{args.rounds} rounds; CPU seconds min/median/max (wall median), per tree")
    header = f"{'command':24}" + "".join(f"{name:>30}" for name in trees)
    print(header + ("   peer/this" if args.peer else ""))
    for label in lines:
        row = f"{label:24}"
        medians = {}
        for name in trees:
            xs = cpu.get((label, name))
            if not xs:
                row += f"{'-':>30}"
                continue
            medians[name] = statistics.median(xs)
            row += (
                f"  {min(xs):6.2f}/{medians[name]:5.2f}/{max(xs):5.2f}"
                f" ({statistics.median(wall[(label, name)]):5.2f})"
            )
        if len(medians) == 2:
            row += f"   {medians['peer'] / medians['this']:8.1f}x"
        print(row)


if __name__ == "__main__":
    main()

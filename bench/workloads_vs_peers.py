"""Compare vmtax workloads with their peers on the same server, measured in the same run.

Rounds alternate (workload then peer, peer then workload, ...); each line prints the median of each
side and their ratio (workload / peer). Targets:

- oltp vs plain `sysbench oltp_read_write` on the same MariaDB: 1 +- 0.05 (tx/s)
- net stream vs `iperf3` over loopback, Nagle off both: 1 +- 0.10 (Mb/s)
- http vs `wrk` at the same concurrency against the same lighttpd: 1 +- 0.10 (req/s)
- hackbench vs hackbench run by hand: 1 +- 0.05 (s)

Then it times `vmtax run --suite apps-quick` (target: at most 180 s on 2 cores).

Example:
  python bench/workloads_vs_peers.py \
    --agent target/x86_64-unknown-linux-gnu/release/vmtax-probe

On a machine shared with other work the figures are noisy: more --rounds help.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vmtax.contract import read_stream
from vmtax.targets.local import LocalTarget
from vmtax.workloads import run_lines
from vmtax.workloads.base import Context, Invocation, Server, free_port, tool
from vmtax.workloads.hackbench import parse_time
from vmtax.workloads.http import lighttpd
from vmtax.workloads.oltp import Oltp, remove_templates, run_sysbench, start_mariadb


def alternate(rounds: int, ours: Callable[[], float], peer: Callable[[], float]) -> tuple:
    # ABBA: who goes first alternates, so that a drift of the machine or what one side
    # leaves behind (dirty pages, a warm cache) does not favour either.
    a, b = [], []
    for i in range(rounds):
        if i % 2 == 0:
            a.append(ours())
            b.append(peer())
        else:
            b.append(peer())
            a.append(ours())
    return statistics.median(a), statistics.median(b)


def agent_throughput(target: LocalTarget, args: list[str]) -> float:
    stream = read_stream(run_lines(target, ["run", *args], 120.0))
    if not stream.runs:
        raise SystemExit(f"{args[0]}: {stream.problem or stream.end}")
    return float(stream.runs[0].summary.throughput)


def oltp(rounds: int, seconds: int) -> tuple[float, float]:
    workload = Oltp()
    params = workload.resolve({"table_size": "10000", "threads": "2"})
    ctx = Context(
        workload=workload,
        target=LocalTarget(),
        inv=Invocation(name="oltp", params={}, duration=float(seconds), kill_after=600),
        params=params,
        env=lambda: None,  # type: ignore[arg-type,return-value]
    )
    with Server("oltp-bench", owner="mysql") as srv:
        conn = start_mariadb(srv, ctx)
        common = [*conn, "--tables=1", "--table-size=10000"]
        tool(["sysbench", "oltp_read_write", *common, "prepare"], timeout=300)

        def ours() -> float:
            for f in srv.dir.glob("lat.*"):
                f.unlink()
            return run_sysbench(ctx, srv, common)[2]

        def peer() -> float:
            out = tool(
                ["sysbench", "oltp_read_write", *common, "--threads=2", f"--time={seconds}", "run"],
                timeout=300,
            )
            line = next(ln for ln in out.splitlines() if "transactions:" in ln)
            return float(line.split("(")[1].split()[0])

        result = alternate(rounds, ours, peer)
    remove_templates()
    return result


def net_stream(target: LocalTarget, rounds: int, seconds: int) -> tuple[float, float]:
    with Server("iperf3") as srv:
        port = free_port()
        srv.start(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)], port=port)

        def peer() -> float:
            out = tool(
                [
                    "iperf3",
                    "-c",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-t",
                    str(seconds),
                    "-l",
                    "16K",
                    "-N",
                    "-J",
                ],
                timeout=120,
            )
            return json.loads(out)["end"]["sum_sent"]["bits_per_second"] / 1e6

        args = [
            "net",
            "--duration",
            str(seconds),
            "--iterations",
            "1000000000",
            "--param",
            "test=stream",
        ]
        return alternate(rounds, lambda: agent_throughput(target, args), peer)


def http(target: LocalTarget, rounds: int, seconds: int, conns: int) -> tuple[float, float]:
    with lighttpd() as srv:
        url = f"http://127.0.0.1:{srv.port}/index.html"

        def ours() -> float:
            args = [
                "run",
                "http",
                "--duration",
                str(seconds),
                "--iterations",
                "1000000000",
                "--param",
                f"port={srv.port}",
                "--param",
                "path=/index.html",
                "--param",
                f"connections={conns}",
            ]
            stream = read_stream(target.run_agent(args, 120))
            return float(stream.runs[0].summary.throughput)

        def peer() -> float:
            out = tool(
                ["wrk", "-t", str(conns), "-c", str(conns), "-d", f"{seconds}s", url],
                timeout=120,
            )
            line = next(ln for ln in out.splitlines() if ln.startswith("Requests/sec:"))
            return float(line.split(":")[1])

        return alternate(rounds, ours, peer)


def hackbench(target: LocalTarget, rounds: int) -> tuple[float, float]:
    def ours() -> float:
        stream = read_stream(
            run_lines(
                target,
                ["run", "hackbench", "--iterations", "3", "--warmup", "0", "--duration", "60"],
                120.0,
            )
        )
        return float(stream.runs[0].summary.median) / 1e9  # ns -> s

    def peer() -> float:
        return statistics.median(
            parse_time(tool(["hackbench", "-g", "4", "-l", "100", "-P"], timeout=120))
            for _ in range(3)
        )

    return alternate(rounds, ours, peer)


def apps_quick(agent: str) -> float:
    with tempfile.TemporaryDirectory(prefix="vmtax-bench-") as tmp:
        t0 = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from vmtax.cli import main; main()",
                "run",
                "--suite",
                "apps-quick",
                "--db",
                f"sqlite:///{Path(tmp) / 'b.db'}",
            ],
            env={**os.environ, "VMTAX_PROBE": agent, "VMTAX_RUN_REPORT": "none"},
            cwd=tmp,
            check=True,
            capture_output=True,
        )
        return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", default=os.environ.get("VMTAX_PROBE"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3, help="seconds per measurement")
    ap.add_argument("--connections", type=int, default=4, help="http concurrency")
    ap.add_argument("--skip-suite", action="store_true", help="do not time apps-quick")
    args = ap.parse_args()
    if not args.agent:
        raise SystemExit("give --agent or set VMTAX_PROBE")
    os.environ["VMTAX_PROBE"] = str(Path(args.agent).resolve())
    target = LocalTarget(args.agent)
    rows = [
        ("oltp vs sysbench (tx/s)", 0.05, oltp(args.rounds, args.seconds)),
        ("net stream vs iperf3 (Mb/s)", 0.10, net_stream(target, args.rounds, args.seconds)),
        (
            f"http vs wrk, {args.connections} conns (req/s)",
            0.10,
            http(target, args.rounds, args.seconds, args.connections),
        ),
        ("hackbench vs by hand (s)", 0.05, hackbench(target, args.rounds)),
    ]
    print(f"{'comparison':44} {'vmtax':>12} {'peer':>12} {'ratio':>7}  target")
    for name, tol, (ours, peer) in rows:
        ratio = ours / peer
        ok = "ok" if abs(ratio - 1) <= tol else "OUT"
        print(f"{name:44} {ours:12.4g} {peer:12.4g} {ratio:7.3f}  1±{tol:.2f} {ok}")
    if not args.skip_suite:
        wall = apps_quick(args.agent)
        ok = "ok" if wall <= 180 else "OUT"
        print(f"{'vmtax run --suite apps-quick (s)':44} {wall:12.1f} {'':12} {'':7}  <=180 {ok}")


if __name__ == "__main__":
    main()

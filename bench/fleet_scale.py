"""A fleet through Ansible against its peer, a bare run of the agent over SSH, at several sizes.

For each size N, N sshd hosts in network namespaces (tests/test_fleet_netns.py's NetnsFleet;
needs root) are measured twice in the same trial, one after the other:

1. ansible: `vmtax run --inventory inventory.ini` (Ansible with `forks` hosts at once; the
   first half of the hosts in group `kvm_hosts`, the rest in group `bare`), into a store of
   its own; wall time, the controller's CPU time and peak memory (this process's children:
   vmtax, ansible-playbook and its workers and ssh clients), and the store's writes per
   second (runs stored / wall time: the rate the store must sustain);
2. bare: the host's fingerprint and the same agent runs, by `ssh` on each host directly
   (`forks` hosts at once, the same key and known_hosts), with no store: the floor a fleet
   engine adds to.

Ansible's overhead per host is (ansible wall - bare wall) x forks / N: the seconds each host
costs beside its agent runs. Figures on a shared machine compare only within one trial.

With --compare, each size's run is then compared by inventory group, hosts as the unit:
`vmtax compare exp=N --by group --baseline group=bare` (the groups are namespaces of one
machine, so the tax between them is not detected unless the machine changed mid-run).

Example:
    python bench/fleet_scale.py --sizes 5,10,20 --forks 5 --runs 2
    python bench/fleet_scale.py --sizes 20 --compare
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_fleet_netns import NetnsFleet, suite_file, vmtax_cmd, vmtax_env  # noqa: E402


def _children_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024


def ansible_run(fleet: NetnsFleet, forks: int, suite: Path, db: str) -> dict[str, float]:
    half = len(fleet.hosts) // 2
    inventory = fleet.inventory_ini(forks, groups={"kvm_hosts": fleet.hosts[:half],
                                                   "bare": fleet.hosts[half:]})  # fmt: skip
    cpu0, _ = _children_cpu()
    t0 = time.monotonic()
    proc = subprocess.run(
        [*vmtax_cmd(), "run", "--inventory", str(inventory), "--limit", "all:!spare", "--suite",
         str(suite), "--db", db],
        capture_output=True, text=True, env=vmtax_env(), check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    cpu1, rss = _children_cpu()
    if proc.returncode != 0:
        sys.exit(f"vmtax run failed: {proc.stderr[-1500:]}")
    from vmtax.store import Store

    with Store.open(db, read_only=True) as store:
        runs = store.runs()
    return {"wall": wall, "cpu": cpu1 - cpu0, "rss": rss, "runs": len(runs),
            "writes": len(runs) / wall}  # fmt: skip


def bare_run(fleet: NetnsFleet, forks: int, runs: int) -> float:
    """The agent's runs of the tiny suite on every host by plain ssh, `forks` at a time."""
    from vmtax.targets.base import find_agent

    agent = str(find_agent())  # the hosts are this machine: the same binary, no copy needed
    ssh = ["ssh", "-i", str(fleet.client_key), "-o", f"UserKnownHostsFile={fleet.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]  # fmt: skip
    args = [agent, "run", "cpuid", "--runs", "1", "--iterations", "2000", "--duration", "0.05",
            "--warmup", "10", "--brief-env"]  # fmt: skip

    def one(host) -> None:
        # As vmtax does: the host's fingerprint first, then its runs one by one.
        subprocess.run([*ssh, f"{fleet.user}@{host.addr}", "--", agent, "env", "--format", "json"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        for _ in range(runs):
            subprocess.run([*ssh, f"{fleet.user}@{host.addr}", "--", *args], check=True,
                           capture_output=True, timeout=120)  # fmt: skip

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=forks) as pool:
        list(pool.map(one, fleet.hosts))
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5,10,20")
    ap.add_argument("--forks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--compare", action="store_true", help="compare each run by group")
    opts = ap.parse_args()
    print("hosts  ansible wall  bare wall  overhead/host  controller CPU  peak RSS  writes/s  load")
    for n in (int(x) for x in opts.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix="vmtax-fleet-bench-"))
        fleet = NetnsFleet(root / "fleet", n)
        try:
            fleet.start()
            suite = suite_file(root, runs=opts.runs)
            db = f"sqlite:///{root / 'store.db'}"
            got = ansible_run(fleet, opts.forks, suite, db)
            bare = bare_run(fleet, opts.forks, opts.runs)
        finally:
            fleet.teardown()
        if opts.compare:
            compared = subprocess.run(
                [*vmtax_cmd(), "compare", "exp=latest", "--by", "group", "--baseline",
                 "group=bare", "--db", db],
                capture_output=True, text=True, env=vmtax_env(), check=False,
            )  # fmt: skip
            print(compared.stdout + compared.stderr, flush=True)
        per_host = (got["wall"] - bare) * opts.forks / n
        print(f"{n:5d}  {got['wall']:10.1f} s  {bare:7.1f} s  {per_host:11.1f} s  "
              f"{got['cpu']:12.1f} s  {got['rss']:5.0f} MiB  {got['writes']:8.2f}  "
              f"{os.getloadavg()[0]:4.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

"""The workloads that run in guests, in a real L1 QEMU guest (TCG here): net, relay,
hackbench and crypto (openssl) from the agent, memcached and lighttpd started by the agent
in the guest, and net from the guest to a netserver on this machine over the guest's NIC.
oltp is stored as failed at L1 with one line naming what the guest lacks, and L0 runs them
all. One L1 boot: about 35 s on 2 quiet cores.
"""

from __future__ import annotations

import sqlite3

from test_workloads_servers import run_suite
from vmtax.targets.base import find_agent

SUITE = """
name = "guest-apps"
[defaults]
runs = 1
duration = 0.3
warmup = 2
timeout = 120
[[probes]]
probe = "net"
params = { test = "rr" }
[[probes]]
probe = "net"
name = "net-host"
params = { test = "rr", peer = "host" }
[[probes]]
probe = "relay"
[[probes]]
probe = "hackbench"
iterations = 2
params = { groups = 1, loops = 10 }
[[probes]]
probe = "memcached"
[[probes]]
probe = "crypto"
iterations = 2
[[probes]]
probe = "crypto"
name = "crypto-software"
iterations = 2
params = { aesni = "off" }
[[probes]]
probe = "http"
params = { file = "file41k" }
[[probes]]
probe = "oltp"
params = { threads = 1 }
"""


def test_workloads_at_l0_and_l1(tmp_path):
    res, db = run_suite(
        SUITE,
        tmp_path,
        str(find_agent()),
        "--levels",
        "L0,L1",
        "--accel",
        "tcg",
        "--guest-net",
        "user",
        timeout=900,
    )
    rows = (
        sqlite3.connect(db)
        .execute(
            "SELECT c.level, r.probe, r.status, r.error FROM runs r "
            "JOIN configurations c ON c.id = r.configuration_id"
        )
        .fetchall()
    )
    status = {(lv, probe): st for lv, probe, st, _ in rows}
    for probe in ("net", "net-host", "relay", "hackbench", "memcached", "crypto", "http", "oltp"):
        assert status[("L0", probe)] == "ok", rows
    for probe in ("net", "net-host", "relay", "hackbench", "memcached", "crypto", "http"):
        assert status[("L1", probe)] == "ok", rows
    assert status[("L1", "oltp")] == "failed"
    error = next(e for lv, p, _, e in rows if (lv, p) == ("L1", "oltp"))
    assert "this machine (L0) only" in error, error
    assert res.returncode == 1 and res.stderr.count("vmtax: error:") == 1, res.stderr
    # crypto in the guest: MB/s, and AES-NI masked takes the software path there too
    # (TCG emulates AES-NI, about 1.6x the software path here; on hardware it is ~20x).
    units = dict(
        sqlite3.connect(db).execute(
            "SELECT DISTINCT probe, unit FROM runs WHERE probe LIKE 'crypto%' OR probe = 'http'"
        )
    )
    assert units == {"crypto": "MB/s", "crypto-software": "MB/s", "http": "ns"}, units
    crypto = dict(
        sqlite3.connect(db).execute(
            "SELECT r.probe, r.median FROM runs r "
            "JOIN configurations c ON c.id = r.configuration_id "
            "WHERE r.probe LIKE 'crypto%' AND c.level = 'L1'"
        )
    )
    assert crypto["crypto"] > 1.2 * crypto["crypto-software"] > 0, crypto

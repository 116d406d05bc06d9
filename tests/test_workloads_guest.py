"""The workloads that run in guests, in a real L1 QEMU guest (TCG here): net, relay and
hackbench from the agent, memcached started by the agent in the guest. The others are
stored as failed at L1 with one line naming what the guest lacks, and L0 runs them all.

Boots a guest (a minute or more under TCG), so it is opt-in: VMTAX_SLOW=1.
"""

from __future__ import annotations

import os
import sqlite3

import pytest

from test_workloads_servers import run_suite
from vmtax.targets.base import find_agent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("VMTAX_SLOW") != "1", reason="boots an L1 guest (minutes); VMTAX_SLOW=1"
    ),
]

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
"""


def test_workloads_at_l0_and_l1(tmp_path):
    res, db = run_suite(
        SUITE, tmp_path, str(find_agent()), "--levels", "L0,L1", "--accel", "tcg", timeout=900
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
    for probe in ("net", "relay", "hackbench", "memcached", "crypto"):
        assert status[("L0", probe)] == "ok", rows
    for probe in ("net", "relay", "hackbench", "memcached"):
        assert status[("L1", probe)] == "ok", rows
    assert status[("L1", "crypto")] == "failed"
    error = next(e for lv, p, _, e in rows if (lv, p) == ("L1", "crypto"))
    assert "this machine (L0) only" in error and "openssl" in error
    assert res.returncode == 1 and res.stderr.count("vmtax: error:") == 1, res.stderr

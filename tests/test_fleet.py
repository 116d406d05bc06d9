"""Fleets from hosts.toml, against three real sshd servers on 127.0.0.1 (one never started)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from test_ssh_support import Sshd, needs_sshd
from vmtax.contract import read_stream
from vmtax.errors import UsageError
from vmtax.targets.fleet import fan_out, load_fleet

TINY_SUITE = """
name = "tiny-fleet"
description = "two probes, briefly"
seed = 3

[defaults]
runs = 2
iterations = 20000
duration = 0.1
warmup = 10
timeout = 60

[[probes]]
probe = "cpuid"

[[probes]]
probe = "syscall"
"""


def _hosts_toml(servers: list[Sshd], limit: int = 2) -> str:
    out = [f"max_concurrency = {limit}", ""]
    for i, s in enumerate(servers):
        out += [
            "[[hosts]]",
            f'url = "{s.url}"',
            f'name = "node{i}"',
            f'identity = "{s.client_key}"',
            f'known_hosts = "{s.known_hosts}"',
            f'remote_dir = "{s.remote_dir}"',
            f'labels = {{ rack = "r{i % 2}" }}',
            "",
        ]
    return "\n".join(out)


@pytest.fixture
def three_hosts(tmp_path):
    needs_sshd()
    servers = [Sshd(tmp_path / f"h{i}") for i in range(3)]
    for s in servers:
        s.trust()
    servers[0].start()
    servers[2].start()  # node1 is down: configured, never started
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts_toml(servers))
    yield path
    for s in servers:
        s.stop()


def test_fan_out_on_three_hosts_with_one_down_gives_two_ok_and_one_failed(three_hosts):
    fleet = load_fleet(three_hosts)
    assert fleet.max_concurrency == 2 and [t.name for t in fleet.targets] == [
        "node0",
        "node1",
        "node2",
    ]

    def one(target):
        return read_stream(target.run_agent(["run", "cpuid", "--runs", "1"], timeout=60))

    result = fan_out(fleet.targets, one, fleet.max_concurrency)
    assert [r.name for r in result.ok] == ["node0", "node2"]
    assert all(r.value.complete for r in result.ok)
    assert [r.name for r in result.failed] == ["node1"]
    assert "cannot connect" in result.failed[0].error


def test_vmtax_run_on_a_fleet_stores_the_hosts_that_worked_and_reports_the_one_down(
    three_hosts, tmp_path
):
    from vmtax.store import Store

    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY_SUITE)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    proc = subprocess.run(
        [vmtax, "run", "--targets", str(three_hosts), "--suite", str(suite), "--db", db],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "node1" in proc.stderr and "cannot connect" in proc.stderr
    runs = Store.open(db).runs()
    ok = runs[runs["status"] == "ok"]
    assert sorted(set(ok["target"])) == ["node0", "node2"]
    assert len(ok) == 2 * 2 * 2  # two hosts x two probes x two runs


def test_a_malformed_fleet_file_is_one_usage_error(tmp_path):
    bad = tmp_path / "hosts.toml"
    bad.write_text('[[hosts]]\nurl = "ssh://a"\nport = 22\n')
    with pytest.raises(UsageError, match="unknown key 'port'"):
        load_fleet(bad)
    bad.write_text('max_concurrency = 0\n[[hosts]]\nurl = "ssh://a"\n')
    with pytest.raises(UsageError, match="max_concurrency"):
        load_fleet(bad)
    bad.write_text('[[hosts]]\nurl = "ssh://a"\n[[hosts]]\nurl = "ssh://a"\n')
    with pytest.raises(UsageError, match="listed twice"):
        load_fleet(bad)
    bad.write_text("hosts = [")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_fleet(bad)


def test_a_huge_ansible_host_range_is_refused_before_it_is_listed(tmp_path):
    # Found by the mutation fuzzer: a mutated range listed 10^11 names and the machine ran
    # out of memory. A range is sized first and refused above 100,000 hosts.
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[all]\nnode[0:99999999999]\n")
    with pytest.raises(UsageError, match=r"host range '\[0:99999999999\]' is empty or too large"):
        load_fleet(inventory)
    inventory.write_text("[all]\nnode[1:3]x[a:b]\n")
    assert len(load_fleet(inventory).targets) == 6

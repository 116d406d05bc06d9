"""Inventories as Ansible reads them: a hosts.toml translated into one, a dynamic inventory
script read as it is, --limit, and the labels each host gets (no host is reached here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vmtax.errors import UsageError
from vmtax.targets.fleet import load_fleet, parse_fleet, release_inventory, toml_inventory

pytestmark = pytest.mark.fast

HOSTS_TOML = """
max_concurrency = 3

[defaults]
identity = "~/.ssh/bench"
known_hosts = "/etc/vmtax/known_hosts"

[[hosts]]
url = "ssh://bench@10.0.0.1"
name = "a1"
labels = { rack = "r1" }

[[hosts]]
url = "ssh://root@[fe80::1]:2222"
name = "a2"
level = "L1"
accept_new_host_key = true
python = "/usr/bin/python3"
"""

# A dynamic inventory: Ansible runs the script and reads its JSON; vmtax never sees a file.
SCRIPT = """#!/bin/sh
if [ "$1" = "--host" ]; then echo '{}'; exit 0; fi
cat <<'EOF'
{"kvm_hosts": {"hosts": ["k1", "k2"], "vars": {"vmtax_level": "L1"}},
 "bare": {"hosts": ["b1"], "vars": {"vmtax_label_rack": "r9"}},
 "fleet": {"children": ["kvm_hosts", "bare"], "vars": {"vmtax_forks": 7}},
 "_meta": {"hostvars": {"k1": {"ansible_host": "10.1.0.1"}}}}
EOF
"""


def test_a_hosts_toml_becomes_an_inventory_with_its_connection_and_labels(tmp_path):
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS_TOML)
    source, forks = toml_inventory(path)
    try:
        hosts = yaml.safe_load(Path(source).read_text())["all"]["hosts"]
    finally:
        release_inventory(source)  # as the run that loads it does when it ends
    assert not Path(source).parent.exists()
    assert forks == 3
    assert hosts["a1"]["ansible_host"] == "10.0.0.1" and hosts["a1"]["ansible_user"] == "bench"
    assert hosts["a1"]["ansible_ssh_private_key_file"].endswith("/.ssh/bench")
    assert hosts["a1"]["ansible_ssh_common_args"] == "-o UserKnownHostsFile=/etc/vmtax/known_hosts"
    assert hosts["a1"]["vmtax_label_rack"] == "r1"
    assert hosts["a2"]["ansible_host"] == "fe80::1" and hosts["a2"]["ansible_port"] == 2222
    assert "StrictHostKeyChecking=accept-new" in hosts["a2"]["ansible_ssh_common_args"]
    assert hosts["a2"]["vmtax_level"] == "L1"
    assert hosts["a2"]["ansible_python_interpreter"] == "/usr/bin/python3"


def test_a_dynamic_inventory_script_is_read_as_it_is_with_limit_and_groups(tmp_path):
    script = tmp_path / "inventory.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    fleet = load_fleet(script)
    assert [t.name for t in fleet.targets] == ["k1", "k2", "b1"]
    assert fleet.max_concurrency == 7  # vmtax_forks, from a parent group's vars
    k1, _, b1 = fleet.targets
    assert k1.level == "L1" and b1.level == "L0"
    assert k1.labels() == {"host": "k1", "group": "kvm_hosts", "groups": "fleet,kvm_hosts"}
    assert b1.labels()["rack"] == "r9" and b1.labels()["group"] == "bare"
    assert k1.provenance()["ansible_host"] == "10.1.0.1"
    limited = load_fleet(script, "kvm_hosts:!k2")
    assert [t.name for t in limited.targets] == ["k1"] and limited.targets[0].inventory.limit


def test_a_malformed_fleet_file_is_one_usage_error(tmp_path):
    bad = tmp_path / "hosts.toml"
    for text, message in (
        ('[[hosts]]\nurl = "ssh://a"\nport = 22\n', "unknown key 'port'"),
        ('max_concurrency = 0\n[[hosts]]\nurl = "ssh://a"\n', "max_concurrency"),
        ('[[hosts]]\nurl = "ssh://a"\n[[hosts]]\nurl = "ssh://a"\n', "listed twice"),
        ("hosts = [", "not valid TOML"),
        ('[[hosts]]\nurl = "http://a"\n', "not an ssh URL"),
        ('[[hosts]]\nurl = "ssh://a"\nlevel = "L7"\n', "level must be"),
    ):
        bad.write_text(text)
        with pytest.raises(UsageError, match=message):
            parse_fleet(text, bad)


def test_vmtax_run_refuses_an_inventory_beside_other_targets_and_a_stray_limit(cli, tmp_path):
    inv = tmp_path / "inv.ini"
    inv.write_text("h1\n")
    for args, message in (
        (["--inventory", str(inv), "--targets", str(inv)], "not both"),
        (["--limit", "web"], "--limit narrows an inventory"),
        (["--inventory", str(tmp_path / "none.ini")], "inventory not found"),
    ):
        proc = cli("run", *args, "--runs", "2")
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


RANGES = """
# node[0:999] in a comment expands to nothing
[all:vars]
ansible_user=bench

[web]
web[01:12]
rack[a:c]-n[0:9:2] ansible_user=ops

[db]
db[x:z]
solo
"""


def test_host_ranges_are_counted_as_ansible_expands_them(tmp_path):
    import json
    import shutil
    import subprocess

    from vmtax.targets.hostranges import ranged_hosts

    assert ranged_hosts(RANGES) == 12 + 3 * 5 + 3  # solo and the section heads are no range
    inv = tmp_path / "inv.ini"
    inv.write_text(RANGES)
    listed = subprocess.run([shutil.which("ansible-inventory") or "ansible-inventory", "-i",
                             str(inv), "--list"], capture_output=True, text=True,
                            check=True)  # fmt: skip
    hosts = json.loads(listed.stdout)["_meta"]["hostvars"]
    assert len(hosts) == ranged_hosts(RANGES) + 1  # Ansible's own count, and solo
    assert len(load_fleet(inv).targets) == len(hosts)


def test_a_range_of_a_hundred_billion_hosts_is_refused_before_ansible_expands_it(cli, tmp_path):
    import time

    inv = tmp_path / "inv.ini"
    inv.write_text("[web]\nnode[0:99999999999]\n")
    t0 = time.monotonic()
    proc = cli("run", "--inventory", str(inv), "--limit", "node1", "--runs", "2")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "100,000,000,000 hosts" in line and "split the range" in line
    # Ansible would take minutes and all of the memory; the count takes milliseconds (a
    # generous bound for a loaded machine, far below the inventory's 300 s timeout).
    assert time.monotonic() - t0 < 60


def test_a_dynamic_inventory_past_the_host_cap_is_refused_with_limit_as_the_way(
    tmp_path, monkeypatch
):
    # The cap lowered to 2 for this test: a real script of 100,001 hosts would cost Ansible
    # minutes here; its count after listing is the same code either way.
    monkeypatch.setattr("vmtax.targets.hostranges.MAX_HOSTS", 2)
    script = tmp_path / "inventory.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    with pytest.raises(UsageError, match=r"3 hosts, more than the 2 .*--limit"):
        load_fleet(script)
    assert len(load_fleet(script, "kvm_hosts").targets) == 2

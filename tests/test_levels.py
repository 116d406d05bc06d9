"""Levels: sizing presets, what cannot be built here, and the L0,L1 run end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vmtax.errors import UsageError
from vmtax.targets.levels import level_targets, size_levels

TINY_SUITE = """
name = "tiny-levels"
description = "cpuid, syscall and cpu, briefly, for the L0/L1 end-to-end test"
seed = 1

[defaults]
runs = 2
iterations = 100000
duration = 0.2
warmup = 10
timeout = 60

[[probes]]
probe = "cpuid"

[[probes]]
probe = "syscall"

[[probes]]
probe = "cpu"
warmup = 1
"""


@pytest.mark.fast
def test_seed_a_reserved_matches_study_a_on_its_machine():
    # Study A: 4 CPUs / 16 GB; L1 got 3 CPUs / 14 GB and L2 2 CPUs / 12 GB.
    s = size_levels(["L0", "L1", "L2"], "seed-a-reserved", cpus=4, memory_mb=16384)
    assert (s["L1"].vcpus, s["L1"].memory_mb) == (3, 14336)
    assert (s["L2"].vcpus, s["L2"].memory_mb) == (2, 12288)
    assert "L0" not in s


@pytest.mark.fast
def test_seed_a_overcommitted_gives_every_level_everything():
    s = size_levels(["L1", "L2", "L3"], "seed-a-overcommitted", cpus=4, memory_mb=16384)
    assert {(x.vcpus, x.memory_mb) for x in s.values()} == {(4, 16384)}


@pytest.mark.fast
def test_seed_c_adds_two_cpus_per_hypervisor_and_scales_down():
    big = size_levels(["L1", "L2", "L3"], "seed-c", cpus=10, memory_mb=65536)
    assert [big[lv].vcpus for lv in ("L1", "L2", "L3")] == [8, 6, 4]
    assert big["L1"].memory_mb - big["L2"].memory_mb == big["L1"].memory_step_mb > 0
    small = size_levels(["L0", "L1"], "seed-c", cpus=2, memory_mb=24576)
    # Two cores: the guest keeps two vCPUs (the IPI probes need a second CPU); recorded.
    assert small["L1"].vcpus == 2 and small["L1"].cpu_step == 0


@pytest.mark.fast
def test_bad_levels_and_presets_are_usage_errors():
    with pytest.raises(UsageError, match="unknown sizing preset"):
        size_levels(["L1"], "seed-z")
    with pytest.raises(UsageError, match="unknown level"):
        level_targets(["L4"])
    with pytest.raises(UsageError, match="listed twice"):
        level_targets(["L1", "L1"])
    with pytest.raises(UsageError, match="listed twice"):
        level_targets(["L1", "L1"], sets=["a", "a"])


@pytest.mark.fast
def test_a_level_twice_is_two_guests_told_apart_by_their_set(tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    a, b = level_targets(["L1", "L1"], accel="tcg", sets=["a", "b"])
    assert (a.name, b.name) == ("qemu-L1-a", "qemu-L1-b")
    assert (a.labels()["set"], b.labels()["set"]) == ("a", "b")
    assert {k: v for k, v in a.labels().items() if k != "set"} == {
        k: v for k, v in b.labels().items() if k != "set"
    }


@pytest.mark.fast
def test_l2_is_a_guest_that_boots_the_inner_guest_sized_by_the_preset(tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    l0, l1, l2 = level_targets(["L0", "L1", "L2"], accel="tcg", preset="seed-a-reserved")
    sizes = size_levels(["L1", "L2"], "seed-a-reserved")
    # The L2 target boots an L1 of L1's size, which boots L2 at L2's size.
    assert (l2.spec.vcpus, l2.spec.memory_mb) == (sizes["L1"].vcpus, sizes["L1"].memory_mb)
    assert l2.inner == [(sizes["L2"].vcpus, sizes["L2"].memory_mb)]
    assert "vmtax_sizes=" in " ".join(l2.spec.extra_append)
    assert l2.labels()["vcpus"] == str(sizes["L2"].vcpus)
    assert l2.provenance()["image_mode"] == "nested2" and l1.inner == []
    assert l2.boot_timeout > l1.boot_timeout


@pytest.mark.fast
def test_l0_is_local_and_l1_is_a_qemu_guest_with_its_labels(tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    l0, l1 = level_targets(["L0", "L1"], accel="tcg", preset="seed-a-overcommitted")
    assert (l0.level, l0.name) == ("L0", "local")
    assert (l1.level, l1.name) == ("L1", "qemu-L1")
    labels = l1.labels()
    assert labels["accel"] == "tcg" and labels["preset"] == "seed-a-overcommitted"
    assert l1.provenance()["sizing"]["vcpus"] == int(labels["vcpus"])


@pytest.mark.fast
def test_guest_net_gives_l1_a_nic_on_the_user_network_and_nothing_else_gets_one(
    tmp_path, monkeypatch, cli
):
    from vmtax.targets.images import Image
    from vmtax.targets.qemu import qemu_argv

    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    image = Image("minimal", "0", tmp_path, {})
    (plain,) = level_targets(["L1"], accel="tcg")
    _, l1 = level_targets(["L0", "L1"], accel="tcg", guest_net="user")
    l1 = l1.target  # behind the levels' one-at-a-time wrapper
    argv = qemu_argv(image, l1.spec, tmp_path)
    assert argv[argv.index("-netdev") + 1] == "user,id=net0"
    forwarded = qemu_argv(image, l1.spec, tmp_path, forwards={7100: 40001, 7101: 40002})
    assert forwarded[forwarded.index("-netdev") + 1] == (
        "user,id=net0,hostfwd=tcp:127.0.0.1:40001-:7100,hostfwd=tcp:127.0.0.1:40002-:7101"
    )
    assert "virtio-net-pci,netdev=net0" in argv and l1.labels()["net"] == "user"
    assert "-netdev" not in qemu_argv(image, plain.spec, tmp_path)
    assert "net" not in plain.labels()
    with pytest.raises(UsageError, match="L1 guests only"):
        level_targets(["L1", "L2"], accel="tcg", guest_net="user")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for args, said in (
        (["--levels", "L0,L1", "--guest-net", "tap"], "--guest-net must be user"),
        (["--guest-net", "user"], "needs a guest level"),
        (["--levels", "L1,L2", "--guest-net", "user"], "L1 guests only"),
    ):
        res = cli("run", *args, "--db", db)
        assert res.returncode == 2 and said in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1


@pytest.mark.slow
def test_run_levels_l0_l1_boots_a_tcg_guest_and_stores_both_levels(tmp_path):
    from vmtax.store import Store
    from vmtax.targets.accel import kvm_verdict

    vmtax = shutil.which("vmtax") or pytest.fail("the vmtax command is not installed")
    suite = tmp_path / "tiny.toml"
    suite.write_text(TINY_SUITE)
    db = f"sqlite:///{tmp_path / 'levels.db'}"
    env = dict(os.environ, VMTAX_CACHE_DIR=str(tmp_path / "cache"))
    # Two boots of L1: run 0 of every probe in the first, run 1 in the second.
    proc = subprocess.run(
        [vmtax, "run", "--levels", "L0,L1", "--boots", "2", "--suite", str(suite), "--db", db],
        capture_output=True,
        text=True,
        env=env,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = Store.open(db)
    runs = store.runs()
    assert set(runs["level"]) == {"L0", "L1"}
    assert (runs["status"] == "ok").all(), runs[["config", "probe", "error"]].to_string()
    for level in ("L0", "L1"):
        got = runs[runs["level"] == level]
        assert sorted(set(got["probe"])) == ["cpu", "cpuid", "syscall"]
        assert len(got) == 6
    l1 = runs[runs["level"] == "L1"]
    # Every L1 result names its accelerator; here KVM does not boot guests, so it is tcg.
    expected = "kvm" if kvm_verdict().kvm_ok else "tcg"
    assert {lab["accel"] for lab in l1["labels"]} == {expected}
    assert all(expected in h for h in l1["hypervisor"])  # the guest's own fingerprint agrees
    # The guest's fingerprint names the QEMU that ran it, which only the controller knows;
    # this machine's has none. Microcode: the agent's, where each kernel shows one.
    from vmtax.targets.qemu import qemu_version

    configs = store.configurations()
    fps = {lv: list(configs.loc[configs["level"] == lv, "fingerprint"]) for lv in ("L0", "L1")}
    assert [fp["qemu"] for fp in fps["L1"]] == [{"version": qemu_version()}]
    assert all("qemu" not in fp for fp in fps["L0"])
    pairs = [ln.partition(":") for ln in Path("/proc/cpuinfo").read_text().splitlines()]
    shown = [v.strip() for k, _, v in pairs if k.strip() == "microcode" and v.strip()]
    assert [fp["cpu"].get("microcode") for fp in fps["L0"]] == [shown[0] if shown else None]

    # Each boot has its own id, run 0 of every probe in one and run 1 in the other; this
    # machine's runs all carry its own boot id; the executed order goes boot by boot.
    with open("/proc/sys/kernel/random/boot_id") as fh:
        assert set(runs.loc[runs["level"] == "L0", "boot"]) == {fh.read().strip()}
    boots = l1.groupby("run_index")["boot"].unique()
    assert [len(boots[0]), len(boots[1])] == [1, 1] and boots[0][0] != boots[1][0]
    by_id = dict(zip(l1["run_id"], l1["boot"], strict=True))
    ran = [by_id[r] for r in store.executed_order(1)["run_id"] if r in by_id]
    assert ran == [boots[0][0]] * 3 + [boots[1][0]] * 3
    store.close()

    cmp = subprocess.run(
        [vmtax, "compare", "--baseline", "level=L0", "--db", db, "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    rows = json.loads(cmp.stdout)["rows"]
    over = {
        r["probe"]: r["overhead"] for r in rows if r["level"] == "L1" and r["probe"] != "geomean"
    }
    assert set(over) == {"cpu", "cpuid", "syscall"}
    assert all(v is not None and v > 0 for v in over.values())
    print(json.dumps(over), file=sys.stderr)


@pytest.mark.fast
def test_a_guest_levels_fingerprint_names_its_qemu(tmp_path, monkeypatch):
    # The agent in a guest cannot see the QEMU that runs it: the controller adds its version
    # to the fingerprint the agent gives, through the levels' one-at-a-time wrapper too.
    from vmtax.contract import Fingerprint
    from vmtax.targets import qemu
    from vmtax.targets.agent import fingerprint

    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    said = "8.2.2 (Debian 1:8.2.2+ds-0ubuntu1.4)"
    monkeypatch.setattr(qemu, "qemu_version", lambda: said)
    l0, l1 = level_targets(["L0", "L1"], accel="tcg")
    assert l0.environment() == {} and l1.environment() == {"qemu": {"version": said}}
    env = (Path(__file__).parent / "vectors" / "env.json").read_text()
    monkeypatch.setattr(l1.target, "run_agent", lambda args, timeout: iter([env]))
    fp = fingerprint(l1)
    assert fp.qemu is not None and fp.qemu.version == said
    assert fp.model_dump(mode="json", by_alias=True) == {
        **Fingerprint.model_validate_json(env).model_dump(mode="json", by_alias=True),
        "qemu": {"version": said},
    }
    assert fingerprint(l0).qemu is None  # this machine: the agent's fingerprint as it is


@pytest.mark.fast
def test_qemu_version_is_the_first_line_after_version_read_with_bounds(tmp_path, monkeypatch):
    from vmtax.targets import qemu

    path = os.environ["PATH"]

    def fake(script: str) -> str | None:
        where = tmp_path / str(len(list(tmp_path.iterdir())))
        where.mkdir()
        exe = where / qemu.QEMU
        exe.write_text("#!/bin/sh\n" + script)
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{where}{os.pathsep}{path}")
        return qemu.qemu_version()

    said = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
    assert fake(f"echo '{said}'; echo 'Copyright (c) 2003-2022 Fabrice Bellard'\n") == (
        "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
    )
    assert fake("echo 'no such option'; exit 1\n") is None
    # One that never ends, or prints without end: cut at the bounds, killed, and None.
    monkeypatch.setattr(qemu, "VERSION_TIMEOUT_S", 0.5)
    started = time.monotonic()
    assert fake("sleep 30\n") is None
    assert fake("yes 'QEMU emulator version 9' | tr -d '\\n'\n") is None
    assert time.monotonic() - started < 10
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no QEMU at all
    assert qemu.qemu_version() is None


@pytest.mark.fast
def test_levels_on_one_machine_take_turns(tmp_path, monkeypatch):
    # A guest booting or measuring must never run beside the level being measured.
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path))
    l0, l1 = level_targets(["L0", "L1"], accel="tcg")
    assert l0.lock is l1.lock and not l0.lock.locked()
    it = l0.run_agent(["run", "syscall", "--runs", "2"], timeout=60)
    first = next(it)
    assert first.startswith("{") and l1.lock.locked()  # L1 would wait here
    rest = list(it)
    assert not l1.lock.locked() and rest[-1].startswith('{"type":"end"')
    assert l0.provenance()["levels_run"] == "one at a time"

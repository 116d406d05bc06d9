"""Workloads see what a target can do (its capabilities), never what class it is."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

import vmtax.workloads
from vmtax.targets.base import Capabilities, Target
from vmtax.targets.levels import OneAtATime
from vmtax.targets.local import LocalTarget
from vmtax.targets.qemu import GuestSpec, QemuTarget
from vmtax.workloads.base import WorkloadError, is_guest, is_local, is_ssh, remote_free_port
from vmtax.workloads.reach import host_end, target_listeners

WORKLOADS = Path(vmtax.workloads.__file__).parent
CONCRETE = {"LocalTarget", "QemuTarget", "SshTarget", "OneAtATime"}


def test_no_workload_asks_what_class_a_target_is():
    # Building this machine's own agent target (a workload's local end) is fine; asking
    # which class a given target is, or reaching behind the levels' wrapper, is not.
    for path in sorted(WORKLOADS.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                kinds = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                assert not kinds & CONCRETE, f"{path.name}:{node.lineno} isinstance on a target"
        assert "__dict__" not in path.read_text(), f"{path.name} reads a wrapper's internals"


def test_the_levels_wrapper_passes_its_targets_capabilities_through():
    lock = threading.Lock()
    local = OneAtATime(LocalTarget(), lock)
    guest = OneAtATime(QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg")), lock)
    assert is_local(local) and not is_guest(local) and not is_ssh(local)
    assert is_guest(guest) and not is_local(guest)
    assert 1024 <= remote_free_port(local) <= 65535
    assert host_end(local, "net").seen_as == "127.0.0.1"


def test_a_guest_without_a_nic_is_refused_before_it_boots():
    guest = QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg"))
    with pytest.raises(WorkloadError, match="--guest-net user"):
        target_listeners(guest, 1, "net")
    assert guest.guest is None  # nothing booted


class _Elsewhere(Target):
    # A target kind no workload knows (stands in for a future one): it runs no agent here.
    name, level = "elsewhere", "L0"

    def prepare(self) -> None:
        pass

    def run_agent(self, args, timeout):  # noqa: ANN001, ANN201
        return iter(())


def test_an_unknown_kind_of_target_gets_one_clear_refusal():
    other = _Elsewhere()
    assert other.capabilities() == Capabilities(kind="other")
    with pytest.raises(WorkloadError, match="neither this machine"):
        host_end(other, "net")
    with pytest.raises(WorkloadError, match="cannot find a free port"):
        remote_free_port(other)

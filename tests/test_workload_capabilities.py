"""Workloads ask a target to place their server and to say how its ends reach this machine;
they never ask what class or kind of target it is."""

from __future__ import annotations

import ast
import re
import socket
import threading
from pathlib import Path

import pytest

import vmtax
import vmtax.workloads
from vmtax.targets.base import Capabilities, Target
from vmtax.targets.levels import OneAtATime
from vmtax.targets.local import LocalTarget
from vmtax.targets.qemu import GuestSpec, QemuTarget
from vmtax.targets.servers import ServerError, ServerSpec, Spot
from vmtax.workloads.reach import host_end, target_listeners

pytestmark = pytest.mark.fast

WORKLOADS = Path(vmtax.workloads.__file__).parent
SRC = Path(vmtax.__file__).parent
CONCRETE = {"LocalTarget", "QemuTarget", "SshTarget", "OneAtATime", "Target"}


def test_no_module_asks_what_class_a_target_is():
    # Building this machine's own agent target (a workload's local end) is fine; asking
    # which class a given target is, anywhere, or reaching behind the levels' wrapper from
    # a workload, is not.
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                kinds = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                assert not kinds & CONCRETE, f"{path}:{node.lineno} isinstance on a target"
    for path in sorted(WORKLOADS.glob("*.py")):
        text = path.read_text()
        assert "__dict__" not in text, f"{path.name} reads a wrapper's internals"
        assert not re.search(r"\.kind ==|is_local|is_guest|is_ssh", text), path.name


def test_the_levels_wrapper_passes_placement_and_reach_through():
    lock = threading.Lock()
    local = OneAtATime(LocalTarget(), lock)
    guest = OneAtATime(QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg")), lock)
    assert host_end(local, "net").seen_as == "127.0.0.1"
    (one,) = target_listeners(local, 1, "net")
    assert one.bind == one.from_host and one.bind.startswith("127.0.0.1:")
    spec = ServerSpec("echo", guest_dir="/srv/echo", guest_port=7)
    with guest.place_server(spec) as placed:
        assert (placed.port, placed.directory, placed.agent_params) == (7, "/srv/echo", {})


def test_this_machine_places_a_server_in_its_own_directory_and_stops_it():
    def command(spot: Spot) -> list[str]:
        return ["python3", "-m", "http.server", "-b", "127.0.0.1", str(spot.port)]

    spec = ServerSpec("pyhttp", command=command, files=lambda d, p: {"index.html": b"hi\n"})
    with LocalTarget().place_server(spec) as placed:
        assert placed.agent_params == {} and placed.here is not None
        assert (Path(placed.directory) / "index.html").read_bytes() == b"hi\n"
        with socket.create_connection(("127.0.0.1", placed.port), 5):
            pass
    assert not Path(placed.directory).exists()  # stopped and removed
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", placed.port), 1):
        pass


def test_a_guest_without_a_nic_is_refused_before_it_boots():
    guest = QemuTarget("L1", GuestSpec(vcpus=1, memory_mb=256, accel="tcg"))
    with pytest.raises(ServerError, match="--guest-net user"):
        target_listeners(guest, 1, "net")
    with pytest.raises(ServerError, match="--guest-net user"):
        host_end(guest, "net")
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
    assert other.capabilities() == Capabilities()
    with pytest.raises(ServerError, match="neither this machine"):
        host_end(other, "net")
    with pytest.raises(ServerError, match="neither this machine"):
        target_listeners(other, 2, "relay spread=host")
    with pytest.raises(ServerError, match="cannot start echo on elsewhere"):
        other.place_server(ServerSpec("echo"))

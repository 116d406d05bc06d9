"""A workload run's header names the boot of the target it ran on, also where the controller
builds the header (a run that failed before measuring, a tool's values parsed here): runs in a
guest's several boots must not read as one boot. The guest side is checked in
tests/test_workloads_guest.py (net-from-host in two boots of L1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmtax.targets.base import find_agent
from vmtax.targets.local import LocalTarget
from vmtax.workloads import run_lines

pytestmark = pytest.mark.fast


def test_a_header_built_by_the_controller_names_the_targets_boot():
    target = LocalTarget(find_agent())
    args = ["run", "hackbench", "--runs", "1", "--iterations", "2", "--param", "nosuch=1"]
    lines = [json.loads(line) for line in run_lines(target, args, 30.0)]
    assert lines[0]["type"] == "header" and lines[-1]["status"] == "error", lines
    here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert lines[0]["boot_id"] == here, lines[0]

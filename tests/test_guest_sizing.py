"""Default guest memory is a safe share of this machine's free memory, capped; a preset given
the machine's size explicitly still divides exactly that."""

from __future__ import annotations

import pytest

from vmtax.targets.levels import GUEST_MEMORY_CAP_MB, size_levels

pytestmark = pytest.mark.fast


def _available_mb() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_default_guests_get_at_most_a_quarter_of_available_memory_and_4_gib():
    # The budget is read at call time; memory can only have grown scarcer or freer by a little
    # between the two reads, so the bound is checked with a 5% margin.
    for preset in ("seed-c", "seed-a-overcommitted", "seed-a-reserved"):
        sizes = size_levels(["L0", "L1", "L2", "L3"], preset)
        limit = min(0.25 * _available_mb() * 1.05, GUEST_MEMORY_CAP_MB)
        for s in sizes.values():
            assert s.memory_mb <= max(limit, 512), (preset, s)
            assert s.host_memory_mb <= GUEST_MEMORY_CAP_MB


def test_an_explicit_machine_size_is_divided_as_the_preset_says():
    s = size_levels(["L1", "L2"], "seed-a-overcommitted", cpus=4, memory_mb=16384)
    assert {(x.vcpus, x.memory_mb) for x in s.values()} == {(4, 16384)}

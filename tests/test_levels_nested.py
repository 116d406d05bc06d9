"""L2 under TCG inside TCG: a real guest boots QEMU, which boots the inner guest whose agent
answers through both virtio-serial hops. Minutes long.
"""

from __future__ import annotations

from vmtax.contract import read_stream
from vmtax.targets.levels import level_targets

pytestmark = []


def test_l2_guest_in_an_l1_guest_streams_whole_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path / "cache"))
    # One vCPU a level (seed-a-reserved): the boot is most of this test, and L2 came up in
    # 274 s against 338 s with seed-c's two vCPUs a level on this 2-core machine (TCG in TCG).
    (target,) = level_targets(["L2"], accel="tcg", preset="seed-a-reserved")
    try:
        lines = list(target.run_agent(["run", "cpuid", "--runs", "2"], timeout=600))
        stream = read_stream(lines)
        assert stream.complete and len(stream.runs) == 2, stream.problem
        assert stream.header is not None and "TCG" in (stream.header.env.hypervisor.vendor or "")
        prov = target.provenance()
        assert target.level == "L2" and prov["image_mode"] == "nested2"
        assert len(prov["inner_levels"]) == 1 and prov["boot_seconds"] > 0
        assert target.labels()["accel"] == "tcg"
    finally:
        target.close()

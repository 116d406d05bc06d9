"""L2 under TCG inside TCG: a real guest boots QEMU, which boots the inner guest whose agent
answers through both virtio-serial hops. Minutes long: the run is `tcg_l2_store`
(tests/background.py), measured beside the other tests.
"""

from __future__ import annotations

import pytest

from vmtax.store import Store

pytestmark = pytest.mark.slow


def test_l2_guest_in_an_l1_guest_streams_whole_runs(tcg_l2_store):
    db, said = tcg_l2_store
    with Store.open(db, read_only=True) as store:
        runs = store.runs()
        configs = store.configurations()
    assert list(runs["status"]) == ["ok", "ok"], said[-2000:]
    assert set(runs["level"]) == {"L2"} and set(runs["probe"]) == {"cpuid"}
    (config,) = configs.itertuples()
    assert config.level == "L2" and "tcg" in (config.hypervisor or "").lower()
    prov = config.provenance
    assert prov["image_mode"] == "nested2"
    assert len(prov["inner_levels"]) == 1 and prov["boot_seconds"] > 0
    assert config.labels["accel"] == "tcg"

"""A sweep with real QEMU (TCG) guests: the first step boots one guest and measures it; at the
second step the new guest cannot start (its QEMU is given too little memory for the kernel
and initramfs), which is reported in one line with the first step kept.

The memory sweep boots a guest at two memory steps (0.6 and 1.5:1) under a 256 MiB cgroup
cap and checks that its file-backed RAM pages inside the cap without an OOM kill.

Both sweeps measure one replicate per step (``--replicates 1 --no-intervals``): they test the
loop with real guests, not the statistics, and each boot costs 10 to 15 s of TCG. The step
order is seeded so that the steps run in ascending order (seed 0 gives (0, 1))."""

from __future__ import annotations

import pytest

from vmtax.store import Store
from vmtax.sweep.guests import qemu_factory
from vmtax.sweep.run import SweepError, SweepRunner
from vmtax.sweep.spec import SweepSpec, Timing

pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def test_qemu_guest_failing_to_boot_at_step_2_keeps_step_1(store: Store, cache):
    spec = SweepSpec(ratios=(0.5, 1.0), timing=Timing(2, 6, 2), host_cpus=2, accel="tcg",
                     events=50, replicates=1, intervals=False, order_seed=0)  # fmt: skip
    assert [i for _, i in spec.order()] == [0, 1]
    exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                  plan={"sweep": spec.as_plan(), "level": "L1"},
                                  vmtax_version="test", agent_version=None)  # fmt: skip
    real = qemu_factory(spec, boot_timeout=240)

    def factory(size, index, vcpus, memory_mb):
        # The second guest gets 40 MiB: QEMU cannot hold the kernel and initramfs in it.
        return real(size, index, vcpus, 40 if index == 1 else memory_mb)

    with pytest.raises(SweepError) as err:
        SweepRunner(store, spec, factory).execute(exp)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("step 2 (1:1): guest 2 of 2 failed to boot")
    rows = store.sweeps.steps(exp)
    assert list(rows["status"]) == ["ok", "failed"]
    ok_id = int(rows["id"].iloc[0])
    samples = store.sweeps.samples([ok_id])
    window = samples[samples["phase"] == "window"]
    assert len(window) == 3 and (window["throughput"] > 0).all()
    # Host-side figures of a real QEMU process: its CPU share, RSS and run-queue wait.
    assert (window["guest_util"] > 0).all() and (window["rss_mb"] > 10).all()
    # One vCPU thread per guest: its wait is a fraction of its time.
    assert window["vcpu_wait"].between(0, 1).all()
    assert rows["detail"].iloc[0]["guests"][0]["qemu_argv"]


def test_memory_sweep_pages_inside_the_cap(store: Store, cache):
    spec = SweepSpec(axis="memory", workload="memory", guests=1, cap_mb=256,
                     ratios=(0.6, 1.5), timing=Timing(3, 6, 3), host_cpus=2,
                     accel="tcg", events=2, replicates=1, intervals=False,
                     order_seed=0)  # fmt: skip
    spec.check()
    assert [i for _, i in spec.order()] == [0, 1]
    exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                  plan={"sweep": spec.as_plan(), "level": "L1"},
                                  vmtax_version="test", agent_version=None)  # fmt: skip
    SweepRunner(store, spec, qemu_factory(spec, boot_timeout=300)).execute(exp)
    rows = store.sweeps.steps(exp)
    assert list(rows["status"]) == ["ok"] * 2
    cap = rows["detail"].iloc[0]["memory_cap"]
    assert cap["limit_mb"] == 256 and cap["guest_ram"].startswith("file-backed")
    samples = store.sweeps.samples(list(rows["id"]))
    window = samples[samples["phase"] == "window"]
    usage = [m["usage_mb"] for m in window["memory"]]
    assert max(usage) <= 256 and max(usage) > 200  # the guest is charged to the cap
    last = window[window["step_id"] == rows["id"].iloc[-1]]
    refaults = sum(m.get("workingset_refault_file_per_s", 0) for m in last["memory"])
    assert refaults > 0  # 384 MiB of guest in 256 MiB: its RAM pages to its file
    assert all(m.get("event_oom_kill", 0) == 0 for m in window["memory"])

"""The Store API round trip, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest

import vmtax.api
from vmtax.errors import VmtaxError
from vmtax.store import RUN_COLUMNS, Store, config_key

pytestmark = pytest.mark.fast

FINGERPRINT = {
    "agent_version": "0.1.0",
    "hostname": "guest-1",
    "hypervisor": {"detected": True, "vendor": "KVM", "evidence": ["cpuid"]},
}
HEADER = {"type": "header", "probe": "cpuid", "unit": "cycles", "better": "lower",
          "throughput_unit": None, "params": {"leaf": 0}}  # fmt: skip


def summary(values: np.ndarray, **extra) -> dict:
    return {
        "type": "run_summary", "run": 0, "n": len(values), "mean": float(values.mean()),
        "median": float(np.median(values)), "stddev": float(values.std(ddof=1)),
        "min": float(values.min()), "max": float(values.max()),
        "p95": float(np.percentile(values, 95)), "p99": float(np.percentile(values, 99)),
        "wall_s": 0.5, "ops_per_sec": 1e6, "throughput": None, "throughput_unit": None,
        "steal_ticks": 3, "cpus": [0], "stopped_by": "iterations", "extra": {"x": 1.5},
        **extra,
    }  # fmt: skip


def new_experiment(store: Store, **kw) -> int:
    args = {"command": ["vmtax", "run", "--suite", "quick"], "suite": "quick", "seed": 42,
            "plan": {"items": [{"probe": "cpuid"}]}, "vmtax_version": "0.1.0",
            "agent_version": "0.1.0"}  # fmt: skip
    args.update(kw)
    return store.create_experiment(**args)


def add(store: Store, exp: int, cfg: int, plan_index: int, run_index: int, values, **kw) -> int:
    args = {
        "experiment_id": exp, "configuration_id": cfg, "probe": "cpuid",
        "plan_index": plan_index, "run_index": run_index, "header": HEADER,
        "values": values, "warmup_values": values[:2] * 2, "status": "ok",
    }  # fmt: skip
    args.update(kw)
    if "summary" not in args:
        args["summary"] = summary(values)
    return store.add_run(**args)


def test_round_trip(any_url):
    rng = np.random.default_rng(7)
    store = Store.open(any_url)
    try:
        exp = new_experiment(store)
        labels = {"vcpus": "2", "accel": "tcg"}
        cfg = store.configuration(experiment_id=exp, level="L1", labels=labels,
                                  fingerprint=FINGERPRINT, target="qemu-L1",
                                  provenance={"qemu": "8.0"})  # fmt: skip
        # get-or-create: the same level and labels in another order are the same config
        assert cfg == store.configuration(experiment_id=exp, level="L1",
                                          labels={"accel": "tcg", "vcpus": "2"},
                                          fingerprint={}, target="x", provenance={})  # fmt: skip
        l0 = store.configuration(experiment_id=exp, level="L0", labels={},
                                 fingerprint={"hypervisor": {"detected": False}},
                                 target="local", provenance={})  # fmt: skip
        assert l0 != cfg

        values = {}
        for i in range(3):
            v = rng.lognormal(9, 0.3, size=1000 + i)  # arbitrary bits: round trip must be exact
            values[add(store, exp, cfg, 0, i, v)] = v
        v0 = rng.normal(100, 1, 50)
        values[add(store, exp, l0, 1, 0, v0)] = v0
        failed = add(store, exp, l0, 2, 0, np.empty(0), summary=None, status="failed",
                     error="agent exited 1")  # fmt: skip
        lost = add(store, exp, cfg, 3, 0, np.empty(0), header=None, summary=None,
                   status="lost", error="stream ended")  # fmt: skip

        got = store.samples(list(values) + [failed, 10**9])
        assert set(got) == set(values) | {failed}
        for run_id, v in values.items():
            assert got[run_id].dtype == np.float64
            assert np.array_equal(got[run_id].view(np.uint64), v.view(np.uint64))
        assert got[failed].size == 0
        first = next(iter(values))
        assert np.array_equal(store.samples([first], warmup=True)[first], values[first][:2] * 2)

        runs = store.runs()
        assert list(runs.columns) == RUN_COLUMNS
        assert len(runs) == 6
        row = runs.set_index("run_id").loc[first]
        assert row["config"] == "L1 accel=tcg vcpus=2" == config_key("L1", labels)
        assert row["labels"] == labels
        assert row["hypervisor"] == "kvm"
        # Stored as the agent said before the unit's rename ("cycles", which were TSC ticks),
        # read back under its honest name.
        assert row["unit"] == "tsc_cycles" and row["better"] == "lower"
        assert row["n"] == 1000 and row["mean"] == pytest.approx(values[first].mean())
        assert row["steal_ticks"] == 3
        by_id = runs.set_index("run_id")
        assert by_id.loc[failed, "status"] == "failed"
        assert pd.isna(by_id.loc[failed, "mean"])  # only ok runs carry statistics
        assert by_id.loc[failed, "error"] == "agent exited 1"
        assert by_id.loc[failed, "hypervisor"] == "none"
        assert pd.isna(by_id.loc[lost, "unit"])

        assert store.completed_plan_indices(exp) == {0, 1}
        assert store.completed_runs(exp) == {(0, 0), (0, 1), (0, 2), (1, 0)}
        # a rerun of the failed item that succeeds completes it; the failure stays as history
        add(store, exp, l0, 2, 0, v0)
        assert store.completed_plan_indices(exp) == {0, 1, 2}
        assert store.runs(["status=failed"])["run_id"].tolist() == [failed]

        # a committed ok run is never written twice
        with pytest.raises(VmtaxError, match="already stored"):
            add(store, exp, cfg, 0, 1, values[first])
        assert len(store.runs()) == 7

        store.finish_experiment(exp, "interrupted")
        info = store.experiment(exp)
        assert info["status"] == "interrupted" and info["ended_at"] is not None
        assert info["ended_at"].tzinfo is not None
        assert info["command"] == ["vmtax", "run", "--suite", "quick"]
        assert info["plan"] == {"items": [{"probe": "cpuid"}]}
        assert [c["config"] for c in info["configurations"]] == ["L1 accel=tcg vcpus=2", "L0"]
        assert info["run_counts"] == {"ok": 5, "failed": 1, "lost": 1}
        store.reopen_experiment(exp)
        assert store.experiment(exp)["status"] == "running"

        cfgs = store.configurations([cfg, l0])
        assert cfgs["config"].tolist() == ["L1 accel=tcg vcpus=2", "L0"]
        assert cfgs["hypervisor"].tolist() == ["kvm", "none"]
        assert cfgs.loc[0, "fingerprint"] == FINGERPRINT
        assert cfgs.loc[0, "provenance"] == {"qemu": "8.0"}
        assert len(store.configurations()) == 2

        exps = store.experiments()
        assert exps["experiment_id"].tolist() == [exp]
        assert exps.loc[0, "n_runs"] == 7 and exps.loc[0, "n_ok"] == 5
        assert exps.loc[0, "n_configurations"] == 2

        counts = store.info()["counts"]
        assert counts == {
            "experiments": 1,
            "configurations": 2,
            "runs": 7,
            "samples": 14,
            "sample_values": sum(len(v) for v in values.values()) + 50 + 10,
        }
        with pytest.raises(VmtaxError, match="no experiment 999"):
            store.experiment(999)
    finally:
        store.close()


def test_each_run_is_committed_when_add_run_returns(any_url):
    # A second, independent connection sees the run at once: nothing waits for a later commit.
    writer = Store.open(any_url)
    reader = Store.open(any_url)
    try:
        exp = new_experiment(writer)
        cfg = writer.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                                   target="local", provenance={})  # fmt: skip
        run = add(writer, exp, cfg, 0, 0, np.arange(10.0))
        assert reader.runs([f"run={run}"])["status"].tolist() == ["ok"]
        assert reader.samples([run])[run].tolist() == list(np.arange(10.0))
    finally:
        writer.close()
        reader.close()


def test_concurrent_writers_from_threads(store):
    # The runner writes from a thread pool; every run must land exactly once.
    exp = new_experiment(store)
    cfgs = [store.configuration(experiment_id=exp, level=f"L{i}", labels={}, fingerprint={},
                                target=f"t{i}", provenance={}) for i in range(4)]  # fmt: skip
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for r in range(10):
                add(store, exp, cfgs[i], i, r, np.full(100, float(i)))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = store.runs()
    assert len(runs) == 40
    assert runs.groupby("level").size().to_dict() == {"L0": 10, "L1": 10, "L2": 10, "L3": 10}


def test_configuration_get_or_create_from_threads(any_url):
    # Several targets start at once and register the same configurations while runs land.
    store = Store.open(any_url)
    exp = new_experiment(store)
    ids: dict[int, set[int]] = {k: set() for k in range(5)}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for k in range(5):
                cfg = store.configuration(experiment_id=exp, level="L1", labels={"k": str(k)},
                                          fingerprint={}, target="t", provenance={})  # fmt: skip
                ids[k].add(cfg)
                add(store, exp, cfg, 100 * t + k, 0, np.arange(50.0))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert errors == []
    assert all(len(v) == 1 for v in ids.values())
    with Store.open(any_url) as s:
        assert len(s.configurations()) == 5 and len(s.runs()) == 30


def test_notebook_api_tidy_frames(any_url):
    store = Store.open(any_url)
    exp = new_experiment(store)
    cfg = store.configuration(experiment_id=exp, level="L1", labels={"accel": "tcg"},
                              fingerprint=FINGERPRINT, target="q", provenance={})  # fmt: skip
    base = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                               target="local", provenance={})  # fmt: skip
    a = add(store, exp, cfg, 0, 0, np.array([1.0, 2.0, 3.0]),
            warmup_values=np.array([9.0, 8.0]))  # fmt: skip
    b = add(store, exp, base, 1, 0, np.array([4.0, 5.0]), warmup_values=np.empty(0))
    store.close()

    with vmtax.api.open(any_url) as res:
        runs = res.runs()
        assert "labels" not in runs.columns
        assert runs.set_index("run_id").loc[a, "label_accel"] == "tcg"
        assert pd.isna(runs.set_index("run_id").loc[b, "label_accel"])

        s = res.samples()
        for col in ["experiment_id", "config", "level", "probe", "run_id", "run_index",
                    "iteration", "warmup", "value", "unit"]:  # fmt: skip
            assert col in s.columns
        assert len(s) == 5 and not s["warmup"].any()
        assert s[s.run_id == a]["iteration"].tolist() == [0, 1, 2]
        assert s[s.run_id == a]["value"].tolist() == [1.0, 2.0, 3.0]
        assert set(s[s.run_id == b]["config"]) == {"L0"}

        w = res.samples("probe=cpuid,accel=tcg", warmup=True)
        assert w["run_id"].unique().tolist() == [a]
        ordered = w.sort_values("iteration")
        assert ordered["iteration"].tolist() == [-2, -1, 0, 1, 2]
        assert ordered["value"].tolist() == [9.0, 8.0, 1.0, 2.0, 3.0]
        assert ordered["warmup"].tolist() == [True, True, False, False, False]
        assert res.samples("probe=nothing").empty


def test_notebook_api_never_creates_a_store(tmp_path):
    with pytest.raises(VmtaxError, match="no such file"):
        vmtax.api.open(str(tmp_path / "typo.db"))
    assert not (tmp_path / "typo.db").exists()
    # The README's form: a sqlite:/// URL of a file not made yet; the error says what makes one.
    with pytest.raises(VmtaxError, match=r"lab.db: no such file \(`vmtax run` or `vmtax import`"):
        vmtax.open(f"sqlite:///{tmp_path / 'lab.db'}")
    assert not (tmp_path / "lab.db").exists()


def test_default_location_and_env_override(tmp_path, monkeypatch):
    monkeypatch.delenv("VMTAX_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Store.open() as s:
        assert s.url_display == f"sqlite:///{tmp_path / 'xdg' / 'vmtax' / 'vmtax.db'}"
    assert (tmp_path / "xdg" / "vmtax" / "vmtax.db").is_file()
    monkeypatch.setenv("VMTAX_DB", str(tmp_path / "env.db"))
    with Store.open() as s:
        assert s.url_display == f"sqlite:///{tmp_path / 'env.db'}"
    other = tmp_path / "explicit.db"
    with Store.open(f"sqlite:///{other}") as s:  # --db wins over VMTAX_DB
        assert s.url_display == f"sqlite:///{other}"


WRITER = """
import sys
import numpy as np
from vmtax.store import Store
store = Store.open(sys.argv[1])
exp = store.create_experiment(command=["w"], suite="s", seed=0, plan={}, vmtax_version="0",
                              agent_version=None)
cfg = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                          target="local", provenance={})
i = 0
while True:
    v = np.random.default_rng(i).random(50_000)
    run = store.add_run(experiment_id=exp, configuration_id=cfg, probe="p", plan_index=i,
                        run_index=0, header=None, summary={"n": v.size}, values=v,
                        warmup_values=v[:3], status="ok")
    print(run, i, flush=True)
    i += 1
"""


def test_sigkill_mid_write_leaves_only_whole_runs(sqlite_url):
    # A killed writer loses at most the run in flight: every stored run has all its samples.
    proc = subprocess.Popen([sys.executable, "-c", WRITER, sqlite_url],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    acknowledged = {}
    try:
        for line in proc.stdout:
            run, seed = map(int, line.split())
            acknowledged[run] = seed
            if len(acknowledged) >= 8:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Store.open(sqlite_url) as store:
        runs = store.runs()
        assert set(acknowledged) <= set(runs["run_id"])
        measured = store.samples(runs["run_id"])
        warm = store.samples(runs["run_id"], warmup=True)
        for run_id, seed in zip(runs["run_id"], runs["plan_index"], strict=True):
            expected = np.random.default_rng(seed).random(50_000)
            assert np.array_equal(measured[run_id], expected)
            assert np.array_equal(warm[run_id], expected[:3])

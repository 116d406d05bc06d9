"""The nested-cost model: recovery of known parameters from synthetic data, the dataset and
measured-level commands, and the bad inputs (each a one-line error with exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vmtax.errors import UsageError
from vmtax.model import Series, fit
from vmtax.model.sources import from_runs

pytestmark = pytest.mark.fast

BENCH = ("cpuid", "io", "timer", "wakeup")
# Ground truth for the synthetic levels, in ns.
A = {"cpuid": 1500.0, "io": 5000.0, "timer": 2000.0, "wakeup": 3300.0}
M = {"cpuid": 20.0, "io": 24.0, "timer": 22.0, "wakeup": 18.0}
E, T_NULL, T_CAUSED = 1000.0, 500.0, 900.0  # round trip, null handler, a caused exit's handler
NOISE = 0.02  # relative run-to-run spread of a run mean
RUNS = 10


def _noisy(rng: np.random.Generator, value: float, n: int = RUNS) -> np.ndarray:
    return value * (1.0 + NOISE * rng.standard_normal(n))


def _truth_no_profile(k: str, depth: int) -> float:
    """Depth-d cost when each caused exit costs one null exit and m_h is the mean class m."""
    h, m_h = A["cpuid"], float(np.mean(list(M.values())))
    return A[k] + M[k] * h * sum(m_h**i for i in range(depth - 1))


def _synthetic(rng: np.random.Generator) -> list[Series]:
    return [
        Series(
            k,
            "ns",
            _noisy(rng, A[k]),
            _noisy(rng, _truth_no_profile(k, 2)),
            measured={3: _noisy(rng, _truth_no_profile(k, 3))},
        )
        for k in BENCH
    ]


def _row(result, bench: str, level: int, dvh: bool) -> pd.Series:
    p = result.predictions
    hit = p[(p["benchmark"] == bench) & (p["level"] == level) & (p["dvh"] == dvh)]
    assert len(hit) == 1, (bench, level, dvh)
    return hit.iloc[0]


def _param(result, bench: str, name: str) -> float:
    p = result.params
    return float(
        p[(p["benchmark"] == bench) & p["parameter"].str.startswith(name)]["estimate"].iloc[0]
    )


# -- recovery -------------------------------------------------------------------------------


def test_recovers_known_parameters_without_profiles():
    result = fit(_synthetic(np.random.default_rng(1)))
    for k in BENCH:
        # a and D within 3% (2% noise on 10 runs gives a standard error of about 0.6%).
        assert _param(result, k, "a ") == pytest.approx(A[k], rel=0.03)
        assert _param(result, k, "D ") == pytest.approx(M[k] * A["cpuid"], rel=0.03)
        assert _param(result, k, "m ") == pytest.approx(M[k], rel=0.05)
    assert _param(result, "all", "m_h") == pytest.approx(np.mean(list(M.values())), rel=0.05)
    for k in BENCH:
        row = _row(result, k, 3, False)
        assert row["predicted"] == pytest.approx(_truth_no_profile(k, 3), rel=0.05)
        assert abs(row["error_pct"]) < 5
        # DVH: the directly handled classes cost a single-level exit at any depth.
        dvh = _row(result, k, 4, True)
        if k == "cpuid":
            assert dvh["predicted"] == pytest.approx(_row(result, k, 4, False)["predicted"])
        else:
            assert dvh["predicted"] == pytest.approx(A[k], rel=0.03)


def _profiled(rng: np.random.Generator) -> tuple[list[Series], dict[str, float]]:
    """Series with exit profiles: VM level 1 exit per iteration (+ a little background), the
    nested level 1 reflected + m_k caused exits, each caused exit's handler T_CAUSED."""
    series, c2_true = [], {}
    for k in BENCH:
        n1 = 1.0
        t1 = T_NULL if k == "cpuid" else A[k] - E
        n2 = 1.0 + M[k]
        t2 = T_NULL + M[k] * T_CAUSED
        c2 = A[k] + (n2 - n1) * E + t2
        c2_true[k] = c2

        def prof(n: float, t: float) -> np.ndarray:
            return np.column_stack([_noisy(rng, n), _noisy(rng, t)])

        series.append(
            Series(
                k,
                "ns",
                _noisy(rng, A[k]),
                _noisy(rng, c2),
                vm_profile=prof(n1, t1),
                nested_profile=prof(n2, t2),
            )
        )
    return series, c2_true


def test_recovers_known_parameters_from_exit_profiles():
    series, c2_true = _profiled(np.random.default_rng(7))
    result = fit(series)
    assert _param(result, "all", "e ") == pytest.approx(E, rel=0.05)
    assert _param(result, "all", "m_h") == pytest.approx(M["cpuid"], rel=0.03)
    for k in BENCH:
        assert _param(result, k, "m ") == pytest.approx(M[k], rel=0.03)
        row = _row(result, k, 2, False)  # the nested level predicted from its profile
        assert row["predicted"] == pytest.approx(c2_true[k], rel=0.03)
        assert abs(row["error_pct"]) < 5
        assert row["basis"].startswith("exit profile")
        d = c2_true[k] - A[k]
        deeper = _row(result, k, 3, False)
        assert deeper["predicted"] == pytest.approx(A[k] + d * (1 + M["cpuid"]), rel=0.05)


# -- the dataset command --------------------------------------------------------------------


def test_dataset_table_puts_the_prediction_beside_the_published_dvh_column(cli):
    res = cli("model", "--dataset", "dvh2020_micro", "--format", "markdown")
    assert res.returncode == 0, res.stderr
    for bench in ("Hypercall", "DevNotify", "ProgramTimer", "SendIPI"):
        assert bench in res.stdout
    assert "L3+DVH" in res.stdout and "13,815" in res.stdout
    # Every held-out cell: measured, predicted, error and the ratio baseline's error.
    line = next(x for x in res.stdout.splitlines() if x.startswith("| DevNotify | L2 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:] == ["held out", "48,390", "42,882", "-11.4", "0.121", "91,784", "+89.7",
                         "cycles"]  # fmt: skip
    assert "| DevNotify | L2+DVH | held out | 13,815 | 4,984 | -63.9 |" in res.stdout
    assert "| Hypercall | L4 | extrapolated |  |" in res.stdout
    assert "model: median |error| 11.2% over 8 held-out cell(s)" in res.stdout
    assert "on the same 5 cell(s): model 10.4%; ratio baseline 42.1% median |error|" in res.stdout


def test_dataset_json_shape(cli):
    res = cli("model", "--dataset", "dvh2020_micro", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    keys = ("benchmark", "level", "dvh", "predicted", "low", "high", "unit", "measured",
            "error_pct", "log_ratio", "kind", "scope", "basis", "baseline",
            "baseline_error_pct", "baseline_log_ratio", "baseline_basis", "parameters")  # fmt: skip
    assert {tuple(sorted(r)) for r in rows} == {tuple(sorted(keys))}
    scopes = {(r["benchmark"], r["level"], r["dvh"]): r["scope"] for r in rows}
    assert scopes[("DevNotify", 2, False)] == scopes[("DevNotify", 2, True)] == "held out"
    assert scopes[("DevNotify", 3, False)] == scopes[("DevNotify", 4, True)] == "extrapolated"
    dev2 = next(
        r for r in rows if (r["benchmark"], r["level"], r["dvh"]) == ("DevNotify", 2, False)
    )
    assert dev2["measured"] == 48390 and dev2["parameters"]["a"] == 4984
    assert dev2["parameters"]["m_h"] == pytest.approx(24.94, abs=0.01)
    assert {r["benchmark"] for r in rows} == {"Hypercall", "DevNotify", "ProgramTimer", "SendIPI"}
    for r in rows:
        assert isinstance(r["level"], int) and isinstance(r["dvh"], bool)
        assert r["low"] <= r["predicted"] <= r["high"]
        assert r["unit"] == "cycles"
    keys = {(r["benchmark"], r["level"], r["dvh"]) for r in rows}
    for bench in ("Hypercall", "SendIPI"):
        assert {(bench, 3, False), (bench, 3, True), (bench, 2, True)} <= keys
    l3 = {r["benchmark"]: r for r in rows if r["level"] == 3 and not r["dvh"]}
    # Each nesting level multiplies: L3 is an order of magnitude above the nested VM.
    assert l3["Hypercall"]["predicted"] > 10 * 37733


def _user_dataset(monkeypatch, tmp_path: Path, name: str, text: str) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    from vmtax.refs import datasets

    folder = datasets.user_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.csv").write_text(text)


def test_dataset_calibrates_on_the_vm_and_nested_columns_only(cli, monkeypatch, tmp_path):
    """Nesting is fitted on the VM and nested-VM columns; the nested+DVH column calibrates
    only the DVH what-if beyond depth 2 (x_k); without it the what-if is a lower bound."""
    from vmtax.refs import datasets

    table = datasets.load("dvh2020_micro")
    changed = table.to_csv(index=False).replace("38743", "99999").replace("13815", "6000")
    _user_dataset(monkeypatch, tmp_path, "dvh_changed_dvh", changed)
    no_dvh = table[table["config"] != "nested VM + DVH"].to_csv(index=False)
    _user_dataset(monkeypatch, tmp_path, "dvh_without_dvh", no_dvh)

    def rows(name: str) -> dict:
        out = json.loads(cli("model", "--dataset", name, "--format", "json").stdout)
        return {(r["benchmark"], r["level"], r["dvh"]): r["predicted"] for r in out}

    a, b, c = rows("dvh2020_micro"), rows("dvh_changed_dvh"), rows("dvh_without_dvh")
    cycles = {(str(r.benchmark), str(r.config)): float(r.cycles) for r in table.itertuples()}
    for key, value in a.items():
        bench, level, dvh = key
        vm = cycles[(bench, "VM")]
        direct = bench != "Hypercall"
        if not (dvh and direct and level > 2):
            assert b[key] == value and c[key] == value, key  # the DVH column plays no part
            continue
        # Recursive DVH: L0 serves the exit at any depth as it does the nested VM's.
        assert value == pytest.approx(cycles[(bench, "nested VM + DVH")])
        assert c[key] == pytest.approx(vm)  # from structure alone: the lower bound a_k
    assert b[("DevNotify", 3, True)] == b[("DevNotify", 4, True)] == pytest.approx(6000)
    text = cli("model", "--dataset", "dvh_without_dvh").stdout
    assert "lower bound" in text and "so are L3+DVH and L4+DVH" in text


# -- bad input ------------------------------------------------------------------------------


def _one_line_usage(res) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmtax: error: "), res.stderr


def test_dataset_lacking_a_column_is_a_usage_error(cli, monkeypatch, tmp_path):
    _user_dataset(monkeypatch, tmp_path, "nocycles", "benchmark,config\nHypercall,VM\n")
    res = cli("model", "--dataset", "nocycles")
    _one_line_usage(res)
    assert "lacks column(s) cycles" in res.stderr


def test_dataset_with_one_level_is_a_usage_error(cli, monkeypatch, tmp_path):
    _user_dataset(monkeypatch, tmp_path, "onelevel", "benchmark,config,cycles\nHypercall,VM,1575\n")
    res = cli("model", "--dataset", "onelevel")
    _one_line_usage(res)
    assert "two levels" in res.stderr


def test_dataset_benchmark_without_exit_mechanism_is_a_usage_error(cli, monkeypatch, tmp_path):
    _user_dataset(
        monkeypatch,
        tmp_path,
        "memonly",
        "benchmark,config,cycles\nmemory,VM,10\nmemory,nested VM,20\n",
    )
    res = cli("model", "--dataset", "memonly")
    _one_line_usage(res)
    assert "no exit mechanism" in res.stderr


def _populate(store, levels: dict[str, dict[str, np.ndarray]], tsc_hz: float = 2e9) -> int:
    """An experiment with one configuration per level (accel label as on the testbed) and
    one stored run per run mean; cpuid in cycles, the others in ns."""
    exp = store.create_experiment(
        command=["vmtax", "run"], suite="dvh-micro", seed=0, plan={}, vmtax_version="t",
        agent_version="t",
    )  # fmt: skip
    plan = 0
    for level, probes in levels.items():
        accel = "tcg" if level in ("L0", "L1") else "kvm"
        cfg = store.configuration(
            experiment_id=exp, level=level, labels={"accel": accel},
            fingerprint={"cpu": {"tsc_hz": tsc_hz}}, target="synthetic", provenance={},
        )  # fmt: skip
        for probe, means in probes.items():
            unit = "cycles" if probe == "cpuid" else "ns"
            for i, mean in enumerate(means):
                store.add_run(
                    experiment_id=exp, configuration_id=cfg, probe=probe, plan_index=plan,
                    run_index=i, header={"unit": unit, "better": "lower"},
                    summary={"n": 5, "mean": float(mean)}, values=np.full(5, float(mean)),
                    warmup_values=np.zeros(0), status="ok",
                )  # fmt: skip
            plan += 1
    store.finish_experiment(exp, "ok")
    return exp


def _measured_levels(rng) -> dict[str, dict[str, np.ndarray]]:
    """L1 under TCG (no exits), L2 the VM, L3 the nested VM, L4 measured for comparison."""
    levels: dict[str, dict[str, np.ndarray]] = {"L1": {}, "L2": {}, "L3": {}, "L4": {}}
    for k in ("cpuid", "timer"):
        scale = 2.0 if k == "cpuid" else 1.0  # cpuid in cycles at 2 GHz
        levels["L1"][k] = _noisy(rng, 20.0 * scale)
        for depth, level in ((1, "L2"), (2, "L3"), (3, "L4")):
            levels[level][k] = _noisy(rng, _truth_two(k, depth) * scale)
    return levels


def _truth_two(k: str, depth: int) -> float:
    h, m_h = A["cpuid"], float(np.mean([M["cpuid"], M["timer"]]))
    return A[k] + M[k] * h * sum(m_h**i for i in range(depth - 1))


def test_measured_levels_predict_and_compare(cli, store, sqlite_url):
    _populate(store, _measured_levels(np.random.default_rng(5)))
    res = cli("model", "exp=latest", "--db", sqlite_url, "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    l4 = {r["benchmark"]: r for r in rows if r["level"] == 4 and not r["dvh"]}
    assert set(l4) == {"cpuid", "timer"}
    for k, r in l4.items():
        assert r["unit"] == "ns"  # cpuid's cycles are put on the ns scale with the TSC rate
        assert r["measured"] == pytest.approx(_truth_two(k, 3), rel=0.05)
        assert abs(r["error_pct"]) < 10
    table = cli("model", "exp=latest", "--db", sqlite_url)
    assert table.returncode == 0, table.stderr
    assert "calibrated on L2 (the VM) and L3 (the nested VM)" in table.stdout


def test_measured_profiles_give_the_nested_prediction():
    """Profiles as ``vmtax.hostprof.store.exit_profiles`` returns them (built here, since the
    recorder needs the nested testbed): the nested level is predicted, not only fitted."""
    rng = np.random.default_rng(9)
    rows, profile_rows, run_id = [], [], 0
    for depth, level in ((1, "L2"), (2, "L3")):
        for k in ("cpuid", "timer"):
            n = 1.0 if depth == 1 else 1.0 + M[k]
            t = (T_NULL if k == "cpuid" else A[k] - E) if depth == 1 else T_NULL + M[k] * T_CAUSED
            cost = A[k] if depth == 1 else A[k] + M[k] * E + t
            for mean in _noisy(rng, cost, 6):
                run_id += 1
                rows.append(
                    {"run_id": run_id, "experiment_id": 1, "configuration_id": depth,
                     "config": f"{level} accel=kvm", "level": level, "labels": {"accel": "kvm"},
                     "probe": k, "unit": "ns", "status": "ok", "mean": mean}
                )  # fmt: skip
                iters = 10_000
                # Recorded at L1 (the VM's hypervisor: every exit passes there first); half
                # of the exits timed. L3's runs are also recorded at L2, which sees only the
                # forwarded exit: the model must not take that one.
                profile_rows += [
                    {"config_key": f"{level} accel=kvm", "level": level, "probe": k,
                     "run_id": run_id, "recorded_at": "L1", "reason": reason, "code": code,
                     "group": group, "count": int(share * n * iters),
                     "time_ns": share * t * iters / 2, "timed": int(share * n * iters / 2),
                     "iterations": iters, "complete": True}
                    for reason, code, group, share in (
                        ("VMRUN", 0x80, "Instruction emulation", 0.75),
                        ("MSR", 0x7C, "Other", 0.25),
                    )
                ]  # fmt: skip
                # A halt: its count is an exit, its time is sleep and must not count.
                profile_rows.append(
                    {"config_key": f"{level} accel=kvm", "level": level, "probe": k,
                     "run_id": run_id, "recorded_at": "L1", "reason": "hlt", "code": 0x78,
                     "group": "Halt", "count": 1, "time_ns": 1e9, "timed": 1,
                     "iterations": iters, "complete": True}
                )  # fmt: skip
                if depth == 2:
                    profile_rows.append(
                        {"config_key": f"{level} accel=kvm", "level": level, "probe": k,
                         "run_id": run_id, "recorded_at": "L2", "reason": "CPUID",
                         "code": 0x72, "group": "Instruction emulation", "count": iters,
                         "time_ns": 50.0 * iters, "timed": iters, "iterations": iters,
                         "complete": True}
                    )  # fmt: skip
    found = from_runs(pd.DataFrame(rows), profiles=pd.DataFrame(profile_rows))
    assert found.vm_level == 2
    result = fit(found.series, offset=found.vm_level - 1)
    for k in ("cpuid", "timer"):
        row = _row(result, k, 3, False)
        assert row["basis"].startswith("exit profile")
        assert abs(row["error_pct"]) < 5
    assert _param(result, "cpuid", "m ") == pytest.approx(M["cpuid"], rel=0.02)


def test_measured_single_level_is_a_usage_error(cli, store, sqlite_url):
    rng = np.random.default_rng(0)
    _populate(store, {"L2": {"cpuid": _noisy(rng, 3000.0)}})
    res = cli("model", "exp=latest", "--db", sqlite_url)
    _one_line_usage(res)
    assert "two levels" in res.stderr


def test_probe_without_exit_mechanism_is_a_usage_error(cli, store, sqlite_url):
    rng = np.random.default_rng(0)
    _populate(store, {"L2": {"memory": _noisy(rng, 30.0)}, "L3": {"memory": _noisy(rng, 60.0)}})
    res = cli("model", "exp=latest", "--db", sqlite_url)
    _one_line_usage(res)
    assert "exit mechanism" in res.stderr
    res = cli("model", "exp=latest", "--db", sqlite_url, "--probe", "memory")
    _one_line_usage(res)
    assert "no exit mechanism" in res.stderr


def test_series_without_the_null_exit_cannot_separate_m_from_h():
    s = Series("timer", "ns", np.array([2000.0]), np.array([40000.0]))
    with pytest.raises(UsageError, match="null exit"):
        fit([s])


def test_model_reads_profiles_stored_by_the_exit_profile_recorder(store):
    """The store path end to end with profiles saved through the exit-profile package's own
    writer (the recorder itself needs the nested testbed; its JSON shape is built here)."""
    import vmtax.hostprof.store as hp
    from vmtax.model.sources import from_store

    rng = np.random.default_rng(11)
    levels = {"L2": {"cpuid": _noisy(rng, 3000.0)}, "L3": {"cpuid": _noisy(rng, 3000.0 + 8000.0)}}
    _populate(store, levels, tsc_hz=1e9)  # 1 GHz: a cycle is a ns
    runs = store.runs(["exp=latest"])
    for r in runs.itertuples():
        n = 1.0 if r.level == "L2" else 9.0
        t = 1000.0 if r.level == "L2" else 1000.0 + 8 * 800.0
        iters = 5  # _populate stores 5 measured values and no warm-up per run
        hp.save_profile(
            store, int(r.run_id), "L1",
            {"isa": "svm", "complete": True, "dropped": 0,
             "reasons": [{"code": 0x72, "count": int(n * iters), "time_ns": int(t * iters),
                          "timed": int(n * iters)}]},
        )  # fmt: skip
    found = from_store(store, ["exp=latest"])
    cpuid = found.series[0]
    assert cpuid.nested_profile is not None and cpuid.vm_profile is not None
    assert cpuid.nested_profile[:, 0] == pytest.approx(9.0)
    result = fit(found.series, offset=found.vm_level - 1)
    assert _param(result, "cpuid", "m ") == pytest.approx(8.0)


def test_assumed_exits_per_exit_predict_the_nested_level(cli, store, sqlite_url):
    """Without a profile, a hand count of exits per nested CPUID (each one null exit) predicts
    the nested level itself; deeper levels use it as m_h."""
    rng = np.random.default_rng(3)
    a, n = 3000.0, 8.5  # cycles at 1 GHz = ns; 8.5 exits per nested CPUID
    truth = a * n
    _populate(store, {"L2": {"cpuid": _noisy(rng, a)}, "L3": {"cpuid": _noisy(rng, truth)}}, 1e9)
    res = cli("model", "--db", sqlite_url, "--exits-per-exit", str(n), "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {(r["level"], r["dvh"]): r for r in json.loads(res.stdout)}
    l3 = rows[(3, False)]
    assert l3["predicted"] == pytest.approx(truth, rel=0.03)
    assert abs(l3["error_pct"]) < 5 and l3["low"] > 0
    assert rows[(4, False)]["predicted"] == pytest.approx(a + (truth - a) * n, rel=0.05)
    bad = cli("model", "--db", sqlite_url, "--exits-per-exit", "0.5")
    _one_line_usage(bad)
    bad = cli("model", "--dataset", "dvh2020_micro", "--exits-per-exit", "8.5")
    _one_line_usage(bad)


def test_a_nested_level_under_tcg_is_refused_not_modelled(cli, store, sqlite_url, tmp_path):
    # A TCG L1 over a KVM-guest L0 (this machine's worked example): emulation has no exits
    # to multiply, so every "prediction" from it would be noise; the report leaves it out.
    from vmtax.experiment.report import write_report
    from vmtax.stats.compare_options import CompareOptions

    rng = np.random.default_rng(1)
    _populate(
        store,
        {
            "L0": {"cpuid": _noisy(rng, 10_000.0), "timer": _noisy(rng, 76_000.0)},
            "L1": {"cpuid": _noisy(rng, 16.0), "timer": _noisy(rng, 133_000.0)},
        },
    )
    res = cli("model", "exp=latest", "--db", sqlite_url)
    _one_line_usage(res)
    assert "needs the nested VM (L1) under KVM" in res.stderr
    out = tmp_path / "report.md"
    write_report(store, ["exp=latest"], out, fmt="markdown", options=CompareOptions(resamples=200))
    assert "vs measured" not in out.read_text()

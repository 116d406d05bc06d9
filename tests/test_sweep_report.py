"""A stored sweep with study B's z/VM shape (synthetic samples written through the store, as
the sweep loop writes them) shown by `vmtax sweep show` and `vmtax report`."""

from __future__ import annotations

import json

import pytest

from vmtax.execution import Storing
from vmtax.store import Store
from vmtax.store.runtimes import RunTimes
from vmtax.sweep.run import SAMPLE_FIELDS
from vmtax.sweep.spec import SweepSpec, Timing
from vmtax.testing.sweeps import study_b

pytestmark = pytest.mark.fast


@pytest.fixture
def zvm_db(tmp_path):
    """Three replicates of each step (units stored round by round, as the sweep stores
    them), each with two window samples."""
    db = str(tmp_path / "zvm.db")
    s = study_b("zvm", seed=1, samples=3)
    spec = SweepSpec(ratios=s.ratios, timing=Timing(60, 600, 60), host_cpus=8, replicates=3)
    n = len(s.ratios)
    with Store.open(db) as store:
        exp = store.create_experiment(command=["vmtax", "sweep"], suite="sweep", seed=0,
                                      plan={"sweep": spec.as_plan(), "level": "L1"},
                                      vmtax_version="test", agent_version=None)  # fmt: skip
        for rep in range(3):
            for i, r in enumerate(s.ratios):
                t, rt, u = s.throughput[i][rep], s.response_s[i][rep], s.utilisation[i][rep]
                rows = [
                    {"phase": "window", "t_s": 60.0 * (k + 1), "throughput": float(t),
                     "resp_mean_s": float(rt), "host_util": float(u), "steal": 0.01,
                     "vcpu_wait": 0.1 * r, "per_guest": [{"guest": 1, "label": "<b>x</b>"}],
                     "memory": {"workingset_refault_file_per_s": 5120.0 if r >= 2.5 else 0.0}}
                    for k in range(2)
                ]  # fmt: skip
                Storing(store, exp).add_unit(
                    {"step_index": rep * n + i, "ratio": r, "axis": "guests", "status": "ok",
                     "guests": int(3 * r * 2), "vcpus": int(8 * r),
                     "guest_memory_mb": int(9196 * r), "host_cpus": 8, "host_memory_mb": None,
                     "detail": {"resp_p95_s": float(rt) * 22, "resp_mean_s": float(rt),
                                "step": i, "replicate": rep}},
                    [{k: row.get(k) for k in SAMPLE_FIELDS} for row in rows],
                    RunTimes(),
                )  # fmt: skip
        store.finish_experiment(exp, "ok")
    return db


def test_show_json_gives_steps_and_the_knee_with_its_interval(cli, zvm_db):
    res = cli("sweep", "show", "latest", "--format", "json", "--db", zvm_db)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [s["ratio"] for s in data["steps"]] == [1.0, 1.5, 2.0, 2.5, 3.0]
    knee = data["knee"]
    # Flat from 2.0 and 10% lower at 3.0: the one bend fitted sits between (2.18 here).
    assert knee["low"] <= knee["ratio"] <= knee["high"] and abs(knee["ratio"] - 2.0) < 0.25
    assert knee["step"] == 2.0 and knee["edge"] is None
    assert data["flat"]["kind"] == "saturated" and data["resp_rise_ratio"] == 2.5
    step = data["steps"][2]
    assert step["throughput"]["samples"] == 6 and step["throughput"]["replicates"] == 3
    assert step["throughput"]["ci_low"] < step["throughput"]["mean"] < step["throughput"]["ci_high"]
    assert step["utilisation"]["host"] == pytest.approx(1.0, abs=0.02)
    # p95 = 22 x the mean response time: 1.76 s up to 2:1, 2.2 s at 2.5:1 (over 2 s).
    assert data["replicates"] == 3
    assert data["slo"]["max_ratio"] == 2.0


def test_markdown_and_table_carry_the_findings(cli, zvm_db):
    res = cli("sweep", "show", "1", "--format", "markdown", "--db", zvm_db)
    assert "Throughput stops scaling at 2.18:1 (95% interval 2.1 to 2.25:1; as a step, 2:1)" in (
        res.stdout
    )
    assert "saturated" in res.stdout
    assert res.stdout.count("\n| ") == 6  # header + 5 steps
    assert "Paging inside the memory cap begins at 2.5:1 (20 MiB/s paged back in)" in res.stdout
    res = cli("sweep", "show", "1", "--db", zvm_db)
    assert res.returncode == 0 and "3:1" in res.stdout


def test_report_of_a_sweep_alone_html_and_markdown(cli, zvm_db, tmp_path):
    out = tmp_path / "r.html"
    res = cli("report", "exp=1", "--db", zvm_db, "-o", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert "<svg" in text and "Overcommitment sweep 1" in text and "knee" in text
    assert "<b>x</b>" not in text  # nothing from the store reaches the page unescaped
    md = tmp_path / "r.md"
    res = cli("report", "exp=1", "--db", zvm_db, "--format", "markdown", "-o", str(md))
    assert res.returncode == 0, res.stderr
    assert "| 2:1 |" in md.read_text()


def test_report_of_runs_and_a_sweep_has_both(cli, zvm_db, tmp_path):
    from vmtax.testing.report_store import populate

    with Store.open(zvm_db) as store:
        runs_exp = populate(store, levels=("L0", "L1"), runs=4, iterations=200)
    out = tmp_path / "both.html"
    res = cli("report", f"exp={runs_exp}", "exp=1", "--db", zvm_db, "-o", str(out),
              "--resamples", "200")  # fmt: skip
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert "Overcommitment sweep 1" in text and 'id="study-a"' in text
    assert text.index("Overcommitment sweep 1") < text.index('id="environment"')

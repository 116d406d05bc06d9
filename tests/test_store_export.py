"""Exports: CSV, JSON and Parquet read back into pandas with the store's exact values."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import vmtax.api
from test_store_api import add, new_experiment
from vmtax.errors import UsageError
from vmtax.store import Store
from vmtax.store.export import export, export_runs, export_samples

pytestmark = pytest.mark.fast


@pytest.fixture
def exp_store(store: Store) -> tuple[Store, int, dict[int, np.ndarray]]:
    rng = np.random.default_rng(3)
    exp = new_experiment(store)
    l1 = store.configuration(experiment_id=exp, level="L1", labels={"accel": "tcg"},
                             fingerprint={}, target="q", provenance={})  # fmt: skip
    l0 = store.configuration(experiment_id=exp, level="L0", labels={}, fingerprint={},
                             target="local", provenance={})  # fmt: skip
    values: dict[int, np.ndarray] = {}
    for i in range(4):
        # awkward bits on purpose: subnormals, huge and tiny values, long mantissas
        v = np.concatenate([rng.lognormal(5, 2, 500), [5e-324, 1.2345678901234567e150, 0.1]])
        values[add(store, exp, l1 if i % 2 else l0, i, 0, v)] = v
    add(store, exp, l0, 9, 0, np.empty(0), summary=None, status="lost", error="killed")
    return store, exp, values


def test_parquet_samples_are_bit_identical(exp_store, tmp_path):
    store, exp, values = exp_store
    out = tmp_path / "s.parquet"
    n = export_samples(store, [f"exp={exp}"], "parquet", out)
    assert n == sum(len(v) for v in values.values())
    back = pd.read_parquet(out)
    for run_id, v in values.items():
        got = back[back["run_id"] == run_id].sort_values("iteration")["value"].to_numpy()
        assert np.array_equal(got.view(np.uint64), v.view(np.uint64))
    stored = store.samples(values)
    assert all(np.array_equal(stored[k].view(np.uint64), v.view(np.uint64))
               for k, v in values.items())  # fmt: skip
    # the file is the same frame the notebook API gives
    expected = vmtax.api.open(store.url_display).samples(f"exp={exp}")
    pd.testing.assert_frame_equal(back, expected, check_exact=True)


def test_parquet_runs_match_the_store(exp_store, tmp_path):
    store, exp, _ = exp_store
    out = tmp_path / "r.parquet"
    assert export_runs(store, [f"exp={exp}"], "parquet", out) == 5
    back = pd.read_parquet(out)
    expected = vmtax.api.tidy_runs(store.runs([f"exp={exp}"]))
    times = ["started_at", "ended_at"]  # each run's, from the store (none recorded here)
    pd.testing.assert_frame_equal(back.drop(columns=times), expected, check_dtype=False,
                                  check_exact=True)  # fmt: skip
    order = store.executed_order(exp).set_index("run_id").loc[back["run_id"], times]
    pd.testing.assert_frame_equal(back[times], order.reset_index(drop=True), check_dtype=False)
    assert back["label_accel"].tolist().count("tcg") == 2


def test_csv_round_trip(exp_store, tmp_path):
    store, exp, values = exp_store
    out = tmp_path / "s.csv"
    export_samples(store, [str(exp)], "csv", out, warmup=True)
    back = pd.read_csv(out)  # pandas parses floats round-trip exact
    for run_id, v in values.items():
        rows = back[(back["run_id"] == run_id) & ~back["warmup"]].sort_values("iteration")
        assert np.array_equal(rows["value"].to_numpy().view(np.uint64), v.view(np.uint64))
    assert back["warmup"].sum() == 2 * len(values)  # two warm-up values per run
    runs_csv = tmp_path / "r.csv"
    export_runs(store, [str(exp)], "csv", runs_csv)
    runs = pd.read_csv(runs_csv)
    assert runs["status"].tolist() == ["ok"] * 4 + ["lost"]
    assert runs["error"].tolist()[-1] == "killed"


def test_json_round_trip(exp_store, tmp_path):
    store, exp, values = exp_store
    out = tmp_path / "s.json"
    export_samples(store, [str(exp)], "json", out)
    rows = json.loads(out.read_text())
    first = next(iter(values))
    got = [r["value"] for r in rows if r["run_id"] == first]
    assert np.array_equal(np.array(got).view(np.uint64), values[first].view(np.uint64))
    assert set(rows[0]) >= {"experiment_id", "config", "level", "probe", "run_id",
                            "run_index", "iteration", "warmup", "value", "unit"}  # fmt: skip
    runs_json = tmp_path / "r.json"
    export_runs(store, [str(exp)], "json", runs_json)
    runs = json.loads(runs_json.read_text())
    assert len(runs) == 5
    assert runs[-1]["mean"] is None and runs[-1]["status"] == "lost"  # null, never NaN


def test_empty_selection_writes_an_empty_file(exp_store, tmp_path):
    store, _, _ = exp_store
    out = tmp_path / "none.parquet"
    assert export_samples(store, ["probe=nothing"], "parquet", out) == 0
    assert pd.read_parquet(out).empty
    none_json = tmp_path / "none.json"
    assert export_runs(store, ["probe=nothing"], "json", none_json) == 0
    assert json.loads(none_json.read_text()) == []


def test_bad_input_unknown_export_format(exp_store, tmp_path):
    store, exp, _ = exp_store
    with pytest.raises(UsageError, match="unknown export format 'xlsx'"):
        export_runs(store, [str(exp)], "xlsx", tmp_path / "x.xlsx")
    assert not (tmp_path / "x.xlsx").exists()


def test_export_one_experiment_writes_runs_and_samples(exp_store, tmp_path):
    store, exp, values = exp_store
    other = new_experiment(store)  # must not leak into the export
    cfg = store.configuration(experiment_id=other, level="L0", labels={}, fingerprint={},
                              target="local", provenance={})  # fmt: skip
    add(store, other, cfg, 0, 0, np.arange(7.0))
    done = export(store, exp, "parquet", tmp_path / "runs.parquet")
    assert done.runs == 5 and done.samples_file == tmp_path / "runs.samples.parquet"
    assert done.samples == sum(len(v) for v in values.values())
    assert done.warmup == 2 * len(values)  # counted apart: the measured count is the estimate's
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    samples = pd.read_parquet(tmp_path / "runs.samples.parquet")
    assert set(runs["experiment_id"]) == {exp} == set(samples["experiment_id"])
    measured = samples[~samples["warmup"]]
    assert len(measured) == sum(len(v) for v in values.values())
    assert samples["warmup"].sum() == 2 * len(values)

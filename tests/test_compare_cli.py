"""`vmtax compare` end to end on a real SQLite store, in every output format."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from vmtax.testing.runs import Config, runs_frame

pytestmark = pytest.mark.fast

DOC = Path(__file__).resolve().parents[1] / "docs" / "compare-json.md"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """A store with one experiment: L0, L1 (+10%) and L2 (+21%) of two probes, 6 runs each."""
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('cmp') / 'v.db'}"
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"accel": "tcg"}, 1.10), Config("L2", {"accel": "tcg"}, 1.21)],
        probes=("syscall", "cpuid"),
        runs=6,
        iterations=500,
        seed=21,
    )
    store = Store.open(url)
    exp = store.create_experiment(
        command=["test"], suite="t", seed=0, plan={}, vmtax_version="0", agent_version=None
    )
    for rec in runs.to_dict(orient="records"):
        cfg = store.configuration(
            experiment_id=exp,
            level=rec["level"],
            labels=rec["labels"],
            fingerprint={},
            target="local",
            provenance={},
        )
        v = samples[rec["run_id"]]
        summary = {
            k: rec[k]
            for k in (
                "n",
                "mean",
                "median",
                "stddev",
                "min",
                "max",
                "p95",
                "p99",
                "wall_s",
                "ops_per_sec",
                "steal_ticks",
            )
        }
        store.add_run(
            experiment_id=exp,
            configuration_id=cfg,
            probe=rec["probe"],
            plan_index=0,
            run_index=rec["run_index"],
            header={"unit": "ns", "better": "lower"},
            summary=summary,
            values=v,
            warmup_values=np.empty(0),
            status="ok",
        )
    store.finish_experiment(exp, "ok")
    store.close()
    return url


@pytest.fixture
def cli(cli):
    """The shared in-process `vmtax`, as (exit code, stdout, stderr)."""

    def call(*args: str) -> tuple[int, str, str]:
        r = cli(*args)
        return r.returncode, r.stdout, r.stderr

    return call


def _schema() -> dict:
    block = re.search(r"## Schema.*?```json\n(.*?)```", DOC.read_text(), re.S)
    return json.loads(block.group(1))


def test_json(cli, db):
    code, out, err = cli(
        "compare",
        "exp=latest",
        "--baseline",
        "level=L0",
        "--db",
        db,
        "--format",
        "json",
        "--resamples",
        "2000",
    )
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, _schema())
    rows = {(r["probe"], r["level"]): r for r in doc["rows"]}
    assert rows[("syscall", "L1")]["verdict"] == "slower"
    assert rows[("syscall", "L1")]["overhead"] == pytest.approx(1.10, abs=0.03)
    assert rows[("cpuid", "L2")]["delta_prev_pct"] == pytest.approx(10, abs=3)
    assert rows[("geomean", "L2")]["verdict"] == "slower"
    assert doc["family_size"] == 4 and doc["adjust"] == "holm"


def test_csv_markdown_table(cli, db):
    code, out, err = cli(
        "compare",
        "exp=1",
        "--baseline",
        "level=L0",
        "--db",
        db,
        "--format",
        "csv",
        "--test",
        "welch",
        "--adjust",
        "bh",
        "--resamples",
        "1000",
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 8 and {r["verdict"] for r in rows} == {"baseline", "slower"}
    code, out, _ = cli(
        "compare",
        "--baseline",
        "level=L0",
        "--db",
        db,
        "--format",
        "markdown",
        "--metric",
        "ops_per_sec",
        "--resamples",
        "1000",
    )
    assert code == 0
    assert "| syscall | ops_per_sec | L1 accel=tcg | 6 |" in out
    code, out, _ = cli(
        "compare", "--baseline", "level=L0", "--db", db, "--noise", "0.5", "--resamples", "1000"
    )
    assert code == 0
    assert "noise ±50%" in out and "slower" not in out  # a 21% slowdown inside a ±50% band


def beside(cli, db, where: str, fmt: str):
    """compare exp=1 against L0 with the fitzgerald2014 rows picked by ``where`` beside it."""
    return cli(
        "compare",
        "exp=1",
        "--baseline",
        "level=L0",
        "--db",
        db,
        "--dataset",
        "fitzgerald2014",
        "--ref-where",
        where,
        "--format",
        fmt,
        "--resamples",
        "1000",
    )


def test_beside_reference_rows(cli, db):
    code, out, err = beside(cli, db, "arch=x86_64,overcommitted=yes,test=threads", "json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc["comparison"], _schema())
    ref = [r for r in doc["beside"] if r["source"] == "fitzgerald2014"]
    assert [r["delta_prev_pct"] for r in ref if r["series"].endswith("tpsec")] == [
        None,
        -26.0,
        -58.67,
    ]
    measured = [r for r in doc["beside"] if r["source"] == "measured"]
    assert {r["level"] for r in measured} == {"L0", "L1 accel=tcg", "L2 accel=tcg"}
    code, out, _ = beside(cli, db, "arch=x86_64,test=cpu", "markdown")
    assert code == 0 and "measured beside fitzgerald2014" in out and "| fitzgerald2014 |" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["exp=1"], "--baseline is required"),
        (["--baseline", "level=L3"], "baseline 'level=L3' matches no completed run"),
        (["--baseline", "accel=tcg"], "matches 2 configurations for probe cpuid"),
        (["--baseline", "level=L0", "--format", "xml"], "unknown format 'xml'"),
        (["--baseline", "level=L0", "--test", "ttest"], "unknown test 'ttest'"),
        (["--baseline", "level=L0", "--adjust", "bonferroni"], "unknown adjustment"),
        (["--baseline", "level=L0", "--metric", "speed"], "unknown metric 'speed'"),
        (["--baseline", "level=L0", "--noise", "2"], "noise must be a fraction"),
        (["--baseline", "lvl"], "malformed selector"),
        (["--baseline", "level=L0", "--boot-cost", "-1"], "--boot-cost"),
        (
            ["--baseline", "level=L0", "--dataset", "fitzgerald2014", "--ref-where", "arch"],
            "--ref-where: 'arch' is not key=value",
        ),
    ],
)
def test_errors_are_one_line(cli, db, args, message):
    code, out, err = cli("compare", *args, "--db", db)
    assert code == 2
    assert err.startswith("vmtax: error: ") and len(err.strip().splitlines()) == 1
    assert message in err


def test_beside_csv_is_one_table(cli, db):
    code, out, err = beside(cli, db, "arch=x86_64,table=7", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert set(rows[0]) == {
        "source",
        "series",
        "level",
        "mean",
        "unit",
        "delta_prev_pct",
        "stderr_pct",
    }
    assert len(rows) == 6 + 6  # 2 probes x 3 levels measured, 3 levels x 2 metrics published


def test_boot_cost_reaches_the_runs_per_boot(cli, db, monkeypatch):
    from vmtax.stats import compare as compare_mod

    seen = []
    real = compare_mod.compare
    monkeypatch.setattr(
        compare_mod,
        "compare",
        lambda *a, **k: seen.append(k["options"].boot_cost_s) or real(*a, **k),
    )
    code, out, _ = cli("compare", "--baseline", "level=L0", "--boot-cost", "90", "--db", db,
                       "--format", "json", "--resamples", "100")  # fmt: skip
    assert code == 0 and seen == [90.0]
    rows = json.loads(out)["rows"]
    # Runs stored without a boot id: one boot each, so no components and no runs per boot.
    assert all(r["boots"] == 1 and r["runs_per_boot"] is None for r in rows)

"""`vmtax results export --format openmetrics`: the text parsed back by prometheus-client's
own parsers, its values against `vmtax compare --format json` on the same store."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_text

from vmtax.testing.runs import Config
from vmtax.testing.stored import store_experiment

pytestmark = pytest.mark.fast

#: A label value the format must escape (quote, backslash, newline), and label keys that are
#: not label names or clash with the fixed labels.
AWKWARD = 'a"b\\c\nd'
LABELS = {"accel": "tcg", "weird-key": AWKWARD, "probe": "clash"}


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """Experiment 1: L0 and L1 (+10%, 3 boots) of two probes. Experiment 2: L1 alone."""
    from vmtax.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('om') / 'v.db'}"
    with Store.open(url) as store:
        store_experiment(
            store,
            [Config("L0"), Config("L1", LABELS, 1.10)],
            probes=("cpuid", "syscall"),
            runs=4,
            boots=3,
            boot_sigma=0.01,
            seed=5,
        )
        store_experiment(store, [Config("L1", {"accel": "kvm"})], runs=4, boots=2, seed=6)
    return url


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_overheads_round_trip_through_the_openmetrics_parser(cli, db, tmp_path):
    out = tmp_path / "vmtax.prom"
    r = cli("results", "export", "1", "--format", "openmetrics", "-o", str(out), "--db", db)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        f"wrote {out} (OpenMetrics, experiment 1: 2 configurations, 3 overheads against level=L0)\n"
    )
    text = out.read_text()
    assert text.endswith("# EOF\n")
    got = families(text)
    c = cli("compare", "exp=1", "--baseline", "level=L0", "--db", db, "--format", "json")
    assert c.returncode == 0, c.stderr
    rows = [row for row in json.loads(c.stdout)["rows"] if row["verdict"] != "baseline"]
    assert [row["probe"] for row in rows] == ["cpuid", "syscall", "geomean"]
    for name, key in (
        ("vmtax_overhead_ratio", "overhead"),
        ("vmtax_overhead_lower_ratio", "ci_low"),
        ("vmtax_overhead_upper_ratio", "ci_high"),
        ("vmtax_overhead_p_adjusted", "p_adjusted"),
    ):
        by_probe = {s.labels["probe"]: s.value for s in got[name]}
        for row in rows:
            if row[key] is None:
                assert row["probe"] not in by_probe  # a missing value is left out, not NaN
            else:
                assert by_probe[row["probe"]] == row[key]  # exact: written as repr
    verdicts = {
        s.labels["probe"]: s.labels["verdict"] for s in got["vmtax_overhead_verdict"] if s.value
    }
    assert verdicts == {"cpuid": "slower", "syscall": "slower", "geomean": "slower"}


def test_configuration_labels_are_escaped_and_renamed(cli, db):
    r = cli("results", "export", "1", "--format", "openmetrics", "-o", "-", "--db", db)
    assert r.returncode == 0, r.stderr
    l1 = [s for s in families(r.stdout)["vmtax_probe_mean"] if s.labels["level"] == "L1"]
    assert len(l1) == 2
    for sample in l1:
        # "weird-key" is not a label name; "probe" is a fixed label: both are renamed.
        assert sample.labels["weird_key"] == AWKWARD
        assert sample.labels["label_probe"] == "clash"
        assert sample.labels["accel"] == "tcg"
        assert sample.labels["probe"] in ("cpuid", "syscall")
        assert sample.labels["unit"] == "ns"
        assert sample.value == pytest.approx(110, rel=0.05)
    runs = {s.labels["level"]: s.value for s in families(r.stdout)["vmtax_probe_runs"]}
    boots = {s.labels["level"]: s.value for s in families(r.stdout)["vmtax_probe_boots"]}
    assert runs == {"L0": 4, "L1": 12} and boots == {"L0": 1, "L1": 3}


def test_the_prometheus_text_parser_reads_it_too(cli, db):
    """The textfile collector and the pushgateway read the Prometheus text format: every
    family is a gauge, and no sample has a timestamp."""
    r = cli("results", "export", "1", "--format", "openmetrics", "-o", "-", "--db", db)
    parsed = list(prometheus_text(r.stdout))
    assert {f.type for f in parsed} == {"gauge"}
    assert all(s.timestamp is None for f in parsed for s in f.samples)
    assert sum(len(f.samples) for f in parsed) == sum(
        len(f.samples) for f in text_string_to_metric_families(r.stdout)
    )


def test_an_experiment_without_a_baseline_says_what_it_wrote(cli, db):
    r = cli("results", "export", "2", "--format", "openmetrics", "-o", "-", "--db", db)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        "wrote stdout (OpenMetrics, experiment 2: 1 configuration and no overheads (one "
        "configuration, nothing to compare it with; only means, runs and boots))\n"
    )
    got = families(r.stdout)
    assert "vmtax_overhead_ratio" not in got
    (info,) = got["vmtax_experiment_info"]
    assert info.labels["baseline"] == "" and info.labels["experiment"] == "2"
    (mean,) = got["vmtax_probe_mean"]
    assert mean.labels["accel"] == "kvm" and math.isfinite(mean.value)


def test_a_baseline_given_is_used(cli, db):
    r = cli(
        "results", "export", "1", "--format", "openmetrics", "-o", "-", "--db", db,
        "--baseline", "level=L1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ratio = {s.labels["probe"]: s.value for s in families(r.stdout)["vmtax_overhead_ratio"]}
    assert ratio["cpuid"] == pytest.approx(1 / 1.10, rel=0.05)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "csv", "--baseline", "level=L0"], "--baseline is for --format openmetrics"),
        (["--format", "openmetrics", "--samples"], "openmetrics has no samples"),
        (["--format", "prom"], "--format must be csv, json, parquet or openmetrics"),
    ],
)
def test_bad_input(cli, db, args, says):
    r = cli("results", "export", "1", "-o", "-", "--db", db, *args)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr

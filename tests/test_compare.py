"""`compare`: verdicts, study-A columns, warnings, geomean, and every output format."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from scipy import stats

from vmtax.errors import UsageError
from vmtax.report import compare_format
from vmtax.stats import significance
from vmtax.stats.compare import ALPHA, compare
from vmtax.testing.runs import Config, runs_frame

DOC = Path(__file__).resolve().parents[1] / "docs" / "compare-json.md"
CHAIN = [Config("L0"), Config("L1", {"accel": "tcg"}, 1.10), Config("L2", {"accel": "tcg"}, 1.21)]


def _row(comp, level, probe="syscall", metric="mean"):
    rows = comp.rows
    hit = rows[(rows.level == level) & (rows.probe == probe) & (rows.metric == metric)]
    assert len(hit) == 1
    return hit.iloc[0]


def test_planted_ten_percent_slowdown_is_slower():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"accel": "kvm"}, 1.10)], runs=10, iterations=1000, seed=3
    )
    comp = compare(runs, "level=L0")
    row = _row(comp, "L1")
    assert row.verdict == "slower"
    assert row.ci_low < 1.10 < row.ci_high
    assert row.p_adjusted < 0.05
    assert _row(comp, "L0").verdict == "baseline"


def test_faster_is_found_and_throughput_is_inverted():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"accel": "kvm"}, 0.8)], runs=10, iterations=500, seed=4
    )
    comp = compare(runs, "level=L0", metric=["mean", "ops_per_sec"], resamples=2000)
    for metric in ("mean", "ops_per_sec"):
        row = _row(comp, "L1", metric=metric)
        assert row.verdict == "faster"
        assert row.overhead == pytest.approx(0.8, abs=0.02)


def _aa_trials(trials: int) -> tuple[int, int]:
    """A/A comparisons (two copies of one configuration): how many verdicts were "~", and how
    many adjusted p-values fell below 0.05. 199 resamples (not 10^4) keep this fast; the
    randomised permutation p-value (k+1)/(B+1) is valid at any B, and steps of 0.005 resolve
    p < 0.05."""
    same = significant = 0
    for seed in range(trials):
        runs, _ = runs_frame(
            [Config("L0", {"copy": "a"}), Config("L0", {"copy": "b"})],
            runs=10,
            iterations=1000,
            seed=1000 + seed,
        )
        row = _row_cfg(compare(runs, "copy=a", resamples=199, seed=seed), "L0 copy=b")
        same += row.verdict == "~"
        significant += row.p_adjusted < ALPHA
    return same, significant


#: Where the count of A/A p-values below 0.05 must fall in 200 trials: the central 99.9% of
#: Binomial(200, 0.05), i.e. 2..21. The noise band plays no part in this count, so a p-value
#: path that always says 0 (200 of 200) or never rejects (0) fails it.
AA_TRIALS = 200
AA_BOUNDS = stats.binom.interval(0.999, AA_TRIALS, ALPHA)


def test_aa_comparisons_reject_at_the_nominal_rate():
    same, significant = _aa_trials(AA_TRIALS)
    assert AA_BOUNDS[0] <= significant <= AA_BOUNDS[1]
    assert same / AA_TRIALS >= 0.95  # with the noise band, a verdict is rarer still


def test_the_aa_check_fails_when_the_p_value_is_forced_to_zero(monkeypatch):
    # The check above must be able to fail on what it names: a broken p-value path.
    monkeypatch.setattr(significance, "pvalue", lambda *a, **k: 0.0)
    _, significant = _aa_trials(40)
    assert significant == 40 and not AA_BOUNDS[0] <= significant * AA_TRIALS / 40 <= AA_BOUNDS[1]


def _row_cfg(comp, config):
    hit = comp.rows[(comp.rows.config == config) & (comp.rows.probe != "geomean")]
    assert len(hit) == 1
    return hit.iloc[0]


def test_study_a_columns_and_chain_deltas():
    runs, samples = runs_frame(CHAIN, runs=6, iterations=300, seed=5)
    comp = compare(runs, "level=L0", resamples=1000)
    l0, l1, l2 = (_row(comp, lv) for lv in ("L0", "L1", "L2"))
    assert np.isnan(l0.delta_prev_pct)
    assert l1.delta_prev_pct == pytest.approx(100 * (l1["mean"] - l0["mean"]) / l0["mean"])
    assert l2.delta_prev_pct == pytest.approx(100 * (l2["mean"] - l1["mean"]) / l1["mean"])
    assert l2.delta_prev_pct == pytest.approx(10, abs=3)
    assert l1.stderr_pct == pytest.approx(100 * l1.stderr / l1["mean"])
    vals = runs[runs.level == "L1"]["mean"].to_numpy()
    assert l1.stderr == pytest.approx(vals.std(ddof=1) / np.sqrt(vals.size))


def test_geomean_row_across_probes():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"a": "b"}, 1.1)],
        probes=("syscall", "cpuid"),
        runs=6,
        iterations=300,
        seed=6,
    )
    comp = compare(runs, "level=L0", resamples=1000)
    geo = comp.rows[comp.rows.probe == "geomean"]
    assert len(geo) == 1
    per = comp.rows[(comp.rows.level == "L1") & (comp.rows.probe != "geomean")]
    assert geo.iloc[0].overhead == pytest.approx(np.exp(np.log(per.overhead).mean()))
    assert geo.iloc[0].ci_low < geo.iloc[0].overhead < geo.iloc[0].ci_high
    assert geo.iloc[0].verdict == "slower"


def test_few_runs_warn_and_cannot_reach_significance():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"a": "b"}, 1.5)], runs=3, iterations=200, seed=7
    )
    comp = compare(runs, "level=L0", resamples=1000)
    row = _row(comp, "L1")
    assert "few runs (3 vs 3)" in row.warnings
    assert "cannot reach significance" in row.warnings
    assert row.verdict == "~"  # a 50% slowdown, but 3 vs 3 runs cannot show it at 5%
    assert row.p_value == pytest.approx(0.1)


def test_a_side_with_one_run_gets_no_p_value_instead_of_an_error():
    # scipy's permutation test refuses a one-run sample; compare and report must not crash.
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"a": "b"}, 1.5)], runs=3, iterations=200, seed=7
    )
    base = runs[runs.level == "L0"]
    runs = runs.drop(base.index[1:])  # the baseline keeps one run
    comp = compare(runs, "level=L0", resamples=1000)
    row = _row(comp, "L1")
    assert np.isnan(row.p_value) and row.verdict == "~"
    assert "cannot reach significance" in row.warnings


def test_the_best_possible_p_counts_the_family_that_holm_adjusts():
    # 5 vs 5 runs, four probes clearly apart: the exact permutation floor is 2/252, Holm over
    # the four tested rows gives 0.032, and no row may say it cannot reach significance
    # (counting the four baseline rows too gave 0.063 and said so).
    configs = [Config("L0"), Config("L1", {"a": "b"}, 3.0)]
    runs, samples = runs_frame(
        configs, probes=("p1", "p2", "p3", "p4"), runs=5, iterations=100, seed=1
    )
    comp = compare(runs, "level=L0", resamples=10_000)
    tested = comp.rows[(comp.rows.level == "L1") & (comp.rows.probe != "geomean")]
    assert len(tested) == 4
    assert tested.p_adjusted.tolist() == pytest.approx([4 * 2 / 252] * 4)
    assert (tested.verdict == "slower").all()
    assert not tested.warnings.str.contains("cannot reach significance").any(), tested.warnings


def test_holm_counts_the_whole_family():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"a": "b"}, 1.02)],
        probes=("a", "b", "c", "d"),
        runs=5,
        iterations=200,
        seed=8,
    )
    holm = compare(runs, "level=L0", resamples=1000)
    none = compare(runs, "level=L0", adjust="none", resamples=1000)
    tested = ~holm.rows.is_baseline & (holm.rows.probe != "geomean")
    assert holm.family_size == 4
    assert (holm.rows[tested].p_adjusted >= none.rows[tested].p_adjusted).all()


def test_baseline_errors():
    runs, samples = runs_frame(CHAIN, runs=3, iterations=50, seed=9)
    with pytest.raises(UsageError, match="matches no completed run"):
        compare(runs, "level=L3")
    with pytest.raises(UsageError, match="matches 2 configurations"):
        compare(runs, "accel=tcg")
    with pytest.raises(UsageError, match="unknown metric"):
        compare(runs, "level=L0", metric="speed")


def _schema() -> dict:
    text = DOC.read_text()
    block = re.search(r"## Schema.*?```json\n(.*?)```", text, re.S)
    assert block, "docs/compare-json.md lost its schema block"
    return json.loads(block.group(1))


@pytest.fixture(scope="module")
def chain_comparison():
    runs, samples = runs_frame(CHAIN, probes=("syscall", "cpuid"), runs=4, iterations=200, seed=10)
    return compare(runs, "level=L0", resamples=500)


def test_json_format_matches_documented_schema(chain_comparison):
    out = json.loads(compare_format.render_comparison(chain_comparison, "json"))
    jsonschema.validate(out, _schema())
    assert out["family_size"] == 4
    assert {r["verdict"] for r in out["rows"]} >= {"baseline"}
    assert any(r["probe"] == "geomean" for r in out["rows"])
    bad = dict(out, rows=[dict(out["rows"][0], verdict="maybe")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema())


def test_csv_format_round_trips(chain_comparison):
    text = compare_format.render_comparison(chain_comparison, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(chain_comparison.rows)
    assert rows[0].keys() >= {"overhead", "ci_low", "ci_high", "delta_prev_pct", "verdict"}
    l2 = [r for r in rows if r["level"] == "L2" and r["probe"] == "syscall"][0]
    assert float(l2["overhead"]) == pytest.approx(
        chain_comparison.rows.query("level == 'L2' and probe == 'syscall'").overhead.iloc[0]
    )


def test_markdown_and_table_formats(chain_comparison):
    from rich.console import Console

    md = compare_format.render_comparison(chain_comparison, "markdown")
    lines = md.splitlines()
    assert lines[0].startswith("| probe | metric | config |")
    assert lines[1].startswith("|---|")
    assert "ΔL(n−1) %" in lines[0] and "95% CI" in lines[0]
    assert "few runs (4 vs 4)" in md
    console = Console(width=250, record=True)
    console.print(compare_format.render_comparison(chain_comparison, "table"))
    text = console.export_text()
    assert "overhead vs baseline level=L0" in text
    assert "L2 accel=tcg" in text and "geomean" in text


def test_chain_across_experiments_and_ties():
    l0, s0 = runs_frame([Config("L0")], runs=5, iterations=100, seed=11, experiment_id=1)
    l1, s1 = runs_frame(
        [Config("L1", {"accel": "kvm"}, 1.2)], runs=5, iterations=100, seed=12, experiment_id=2
    )
    l1["run_id"] += 100
    s1 = {k + 100: v for k, v in s1.items()}
    import pandas as pd

    runs = pd.concat([l0, l1], ignore_index=True)
    comp = compare(runs, "level=L0", resamples=500)
    assert _row(comp, "L1").delta_prev_pct == pytest.approx(20, abs=4)
    # the same L0 in a third experiment: two equally good predecessors -> no guess
    l0b, s0b = runs_frame([Config("L0")], runs=5, iterations=100, seed=13, experiment_id=3)
    l0b["run_id"] += 200
    runs = pd.concat([runs, l0b], ignore_index=True)
    comp = compare(runs, "exp=1", resamples=500)
    assert set(comp.rows.config) >= {"#1 L0", "#3 L0", "L1 accel=kvm"}
    row = comp.rows[comp.rows.config == "L1 accel=kvm"].iloc[0]
    assert np.isnan(row.delta_prev_pct)


def test_single_probe_family_and_types():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"a": "b"}, 1.1)], runs=5, iterations=100, seed=14
    )
    comp = compare(runs, "level=L0", resamples=500)
    assert comp.rows.is_baseline.dtype == bool
    assert comp.family_size == 1
    assert not (comp.rows.probe == "geomean").any()
    doc = comp.to_json()
    assert [r["is_baseline"] for r in doc["rows"]] == [True, False]


def test_an_imprecise_probe_keeps_a_clear_verdict_and_loses_only_no_difference():
    runs, _ = runs_frame(
        [Config("L0"), Config("L1", {"accel": "tcg"}, 5.0), Config("L2", {"accel": "tcg"}, 5.0)],
        runs=6,
        iterations=200,
        seed=21,
    )
    ids = dict(zip(runs["config"], runs["configuration_id"], strict=False))
    slow_cfg, same_cfg = ids["L1 accel=tcg"], ids["L2 accel=tcg"]
    comp = compare(
        runs, "level=L1", resamples=999, imprecise={(slow_cfg, "syscall"), (same_cfg, "syscall")}
    )
    by_level = {r.level: r for r in comp.rows.itertuples() if r.probe == "syscall"}
    assert by_level["L0"].verdict == "faster" and "imprecise" in by_level["L0"].warnings
    assert by_level["L2"].verdict == "imprecise"  # would be "~": no difference is no verdict


def test_a_small_ratio_and_its_interval_keep_three_significant_digits():
    from vmtax.report.compare_format import fmt_ci, fmt_ratio

    # A TCG guest's CPUID against a KVM guest's: 0.0016x, CI 0.0014..0.0018. Three decimals
    # printed "0.002 [0.001, 0.002]", an interval that did not contain its own estimate.
    assert fmt_ratio(0.0016098) == "0.00161"
    assert fmt_ci(0.0014131, 0.0018339) == "[0.00141, 0.00183]"
    assert fmt_ratio(5.6978) == "5.698" and fmt_ratio(0.5) == "0.500"

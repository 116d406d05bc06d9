"""`compare`: verdicts, study-A columns, warnings, geomean, and every output format."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vmtax.errors import UsageError
from vmtax.report import compare_format
from vmtax.stats import boots, intervals, significance
from vmtax.stats.compare import ALPHA, compare
from vmtax.testing.runs import Config, runs_frame

DOC = Path(__file__).resolve().parents[1] / "docs" / "compare-json.md"
CHAIN = [Config("L0"), Config("L1", {"accel": "tcg"}, 1.10), Config("L2", {"accel": "tcg"}, 1.21)]


def _row(comp, level, probe="syscall", metric="mean"):
    rows = comp.rows
    hit = rows[(rows.level == level) & (rows.probe == probe) & (rows.metric == metric)]
    assert len(hit) == 1
    return hit.iloc[0]


@pytest.mark.fast
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


@pytest.mark.fast
def test_faster_is_found_and_throughput_is_inverted():
    runs, samples = runs_frame(
        [Config("L0"), Config("L1", {"accel": "kvm"}, 0.8)], runs=10, iterations=500, seed=4
    )
    comp = compare(runs, "level=L0", metric=["mean", "ops_per_sec"], resamples=2000)
    for metric in ("mean", "ops_per_sec"):
        row = _row(comp, "L1", metric=metric)
        assert row.verdict == "faster"
        assert row.overhead == pytest.approx(0.8, abs=0.02)


#: The A/A family: 12 probes, Holm-adjusted together, as in the default suite.
AA_PROBES = tuple(f"probe{i:02d}" for i in range(12))


def _aa_frame(rng, sides, *, run_sd=0.01, boot_sd=0.02, boots_column=True) -> pd.DataFrame:
    """A runs frame of identical configurations (an A/A experiment): ``sides`` holds (level,
    labels, boots, runs per boot). Every boot draws its own effect (2% sd) per probe, so the
    probes' p-values are independent: the hardest case for a family-wise guarantee."""
    cols: dict[str, list] = {k: [] for k in ("probe", "config", "level", "labels", "boot")}
    cols.update(configuration_id=[], run_index=[], mean=[])
    for cid, (level, labels, n_boots, per_boot) in enumerate(sides, 1):
        n = n_boots * per_boot
        sd = boot_sd if n_boots > 1 else 0.0  # one boot: its effect is the comparison's truth
        effect = np.repeat(sd * rng.standard_normal((len(AA_PROBES), n_boots)), per_boot, axis=1)
        values = 100 * np.exp(effect + run_sd * rng.standard_normal((len(AA_PROBES), n)))
        for probe, row in zip(AA_PROBES, values, strict=True):
            cols["probe"] += [probe] * n
            cols["config"] += [" ".join([level, *(f"{k}={v}" for k, v in labels.items())])] * n
            cols["level"] += [level] * n
            cols["labels"] += [labels] * n
            cols["boot"] += [f"{cid}-{b}" for b in range(n_boots) for _ in range(per_boot)]
            cols["configuration_id"] += [cid] * n
            cols["run_index"] += list(range(n))
            cols["mean"] += list(row)
    frame = pd.DataFrame(cols).assign(
        status="ok", experiment_id=1, better="lower", unit="ns", throughput_unit=None, wall_s=0.5
    )
    return frame if boots_column else frame.drop(columns="boot")


#: A guest level in 6 boots of 3 runs against this machine's 18 runs (Behrens-Fisher on boot
#: means), and two guest configurations in 3 boots of 2 runs each, as `vmtax run --levels
#: L1,L1 --runs 6` measures them (Welch's t on the log ratio of boot means).
AA_DESIGNS = {
    "boots vs L0": ([("L0", {}, 1, 18), ("L1", {"copy": "b"}, 6, 3)], "level=L0"),
    "boots vs boots": ([("L1", {"copy": "a"}, 3, 2), ("L1", {"copy": "b"}, 3, 2)], "copy=a"),
}


def _aa(design: str | tuple, trials: int, seed: int, **frame) -> tuple[np.ndarray, np.ndarray]:
    """(trials, 12) raw p-values and adjusted p-values of A/A comparisons. 900 resamples keep
    the permutation test quick and still let it reach Holm's first threshold (0.05 / 12)."""
    sides, baseline = AA_DESIGNS[design] if isinstance(design, str) else design
    rng = np.random.default_rng(seed)
    raw, adj = [], []
    for t in range(trials):
        comp = compare(_aa_frame(rng, sides, **frame), baseline, resamples=900, seed=t)
        rows = comp.rows[~comp.rows.is_baseline & (comp.rows.probe != "geomean")]
        assert len(rows) == len(AA_PROBES)
        raw.append(rows.p_value.astype(float).to_numpy())
        adj.append(rows.p_adjusted.astype(float).to_numpy())
    return np.array(raw), np.array(adj)


AA_TRIALS = 20
#: Family-wise: at most alpha of the A/A experiments may have any adjusted p below alpha; with
#: 20 experiments, a share above 5/20 (the 99.9% point of Binomial(20, 0.05)) fails. That
#: bound alone cannot tell 5% from 10% in experiments CI can afford, hence the second check.
AA_MAX_FAMILIES = int(stats.binom.ppf(0.999, AA_TRIALS, ALPHA))
#: Holm's guarantee needs valid p-values: of the 240 raw p-values, the share below 0.5 must
#: lie in 0.40..0.60 (the central 99.8% of Binomial(240, 0.5)); a p-value halved puts all
#: of them below 0.5, one forced to 0 too.
AA_HALF_BAND = (0.40, 0.60)


def _aa_checks(raw: np.ndarray, adj: np.ndarray) -> tuple[bool, bool]:
    families = float(np.mean(np.nanmin(adj, axis=1) < ALPHA))
    below_half = float(np.mean(raw < 0.5))
    return families <= AA_MAX_FAMILIES / AA_TRIALS, AA_HALF_BAND[0] <= below_half <= AA_HALF_BAND[1]


@pytest.mark.slow
@pytest.mark.parametrize("design", sorted(AA_DESIGNS))
def test_aa_experiments_give_verdicts_in_at_most_alpha_of_families(design):
    raw, adj = _aa(design, AA_TRIALS, seed=11)
    assert np.isfinite(raw).all()
    family_ok, calibrated = _aa_checks(raw, adj)
    assert family_ok and calibrated, (np.nanmin(adj, axis=1), np.mean(raw < 0.5))
    assert np.mean(raw < ALPHA) <= stats.binom.ppf(0.999, raw.size, ALPHA) / raw.size


@pytest.mark.fast
@pytest.mark.parametrize("broken", ["halved", "zero"])
def test_the_aa_check_fails_on_a_halved_or_zero_p_value(monkeypatch, broken):
    # The checks above must fail on what they name: a p-value path that is too small.
    change = (lambda p: p / 2) if broken == "halved" else (lambda p: 0.0 * p)
    for name in ("pvalue", "boot_pvalue"):
        real = getattr(significance, name)
        monkeypatch.setattr(significance, name, lambda *a, _real=real, **k: change(_real(*a, **k)))
    for design in sorted(AA_DESIGNS):
        raw, adj = _aa(design, 4, seed=12)
        family_ok, calibrated = _aa_checks(raw, adj)
        assert not calibrated
        if broken == "zero":
            assert not family_ok


@pytest.mark.fast
def test_two_guest_configurations_in_three_boots_each_can_give_a_verdict():
    # Permuting 3 boot means against 3 stopped at p = 0.1 (1.2 after Holm over 12 probes):
    # no verdict was possible. Welch's t on the log ratio of boot means finds a 20% tax.
    sides, baseline = AA_DESIGNS["boots vs boots"]
    runs = _aa_frame(np.random.default_rng(15), sides)
    runs.loc[runs.config == "L1 copy=b", "mean"] *= 1.2
    comp = compare(runs, baseline, resamples=900)
    rows = comp.rows[~comp.rows.is_baseline & (comp.rows.probe != "geomean")]
    assert (rows.boots == 3).all() and (rows.verdict == "slower").mean() > 0.5
    assert not rows.warnings.str.contains("cannot reach significance").any()
    for row in rows.itertuples():
        assert (row.p_value < ALPHA) == (row.ci_low > 1 or row.ci_high < 1)


#: Two guest configurations in 6 boots of 3 runs each.
WIDE_BOOTS = ([("L1", {"copy": "a"}, 6, 3), ("L1", {"copy": "b"}, 6, 3)], "copy=a")


@pytest.mark.fast
def test_ignoring_the_boots_gives_false_verdicts_in_most_aa_families():
    # Guest configurations with their boots forgotten (runs as the unit, as compare did
    # before boots were stored): boot effects of 2% read as differences.
    raw, adj = _aa(WIDE_BOOTS, 6, seed=13, boots_column=False)
    assert (np.nanmin(adj, axis=1) < ALPHA).sum() >= 4


def _row_cfg(comp, config):
    hit = comp.rows[(comp.rows.config == config) & (comp.rows.probe != "geomean")]
    assert len(hit) == 1
    return hit.iloc[0]


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
def test_json_format_matches_documented_schema(chain_comparison):
    out = json.loads(compare_format.render_comparison(chain_comparison, "json"))
    jsonschema.validate(out, _schema())
    assert out["family_size"] == 4
    assert {r["verdict"] for r in out["rows"]} >= {"baseline"}
    assert any(r["probe"] == "geomean" for r in out["rows"])
    bad = dict(out, rows=[dict(out["rows"][0], verdict="maybe")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema())


@pytest.mark.fast
def test_csv_format_round_trips(chain_comparison):
    text = compare_format.render_comparison(chain_comparison, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(chain_comparison.rows)
    assert rows[0].keys() >= {"overhead", "ci_low", "ci_high", "delta_prev_pct", "verdict"}
    l2 = [r for r in rows if r["level"] == "L2" and r["probe"] == "syscall"][0]
    assert float(l2["overhead"]) == pytest.approx(
        chain_comparison.rows.query("level == 'L2' and probe == 'syscall'").overhead.iloc[0]
    )


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
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


@pytest.mark.fast
def test_a_small_ratio_and_its_interval_keep_three_significant_digits():
    from vmtax.report.compare_format import fmt_ci, fmt_ratio

    # A TCG guest's CPUID against a KVM guest's: 0.0016x, CI 0.0014..0.0018. Three decimals
    # printed "0.002 [0.001, 0.002]", an interval that did not contain its own estimate.
    assert fmt_ratio(0.0016098) == "0.00161"
    assert fmt_ci(0.0014131, 0.0018339) == "[0.00141, 0.00183]"
    assert fmt_ratio(5.6978) == "5.698" and fmt_ratio(0.5) == "0.500"


@pytest.mark.fast
def test_boot_level_rows_carry_the_variance_components_and_one_boot_says_so():
    rng = np.random.default_rng(14)
    sides = [("L0", {}, 1, 12), ("L1", {"copy": "b"}, 4, 3)]
    runs = _aa_frame(rng, sides, boot_sd=0.05)
    comp = compare(runs, "level=L0", resamples=999)
    l1 = comp.rows.query("config == 'L1 copy=b'")
    first = l1.iloc[0]
    assert first.boots == 4 and first.n_runs == 12
    vc = boots.variance_components(
        np.log(runs.query("probe == @first.probe and level == 'L1'")["mean"]),
        runs.query("probe == @first.probe and level == 'L1'")["boot"],
    )
    assert first.between_share == pytest.approx(vc.between_share)
    assert first.runs_per_boot == vc.runs_per_boot(60.0, 0.5)
    assert "one boot" not in first.warnings  # L0's runs are its unit
    # The boot means are the unit: 4 boots, not 12 runs, set the interval.
    ids = runs.query("probe == @first.probe and level == 'L1'")["boot"]
    vals = runs.query("probe == @first.probe and level == 'L1'")["mean"].to_numpy()
    base = runs.query("probe == @first.probe and level == 'L0'")["mean"].to_numpy()
    want = intervals.boot_ratio_interval(boots.units(vals, ids), boots.units(base, None), "lower")
    assert (first.ci_low, first.ci_high) == pytest.approx((want.low, want.high))
    geo = comp.rows[comp.rows.probe == "geomean"].iloc[0]
    assert "boots as the unit" in geo.warnings
    doc = comp.to_json()
    assert doc["rows"][1]["boots"] == 4 and isinstance(doc["rows"][1]["runs_per_boot"], int)
    # Forget the boots: one boot a side, and every output says the interval holds for it only.
    flat = compare(runs.drop(columns="boot"), "level=L0", resamples=999)
    assert all(
        boots.ONE_BOOT in w
        for w in flat.rows.query("level == 'L1' and probe != 'geomean'").warnings
    )
    text = compare_format.render_comparison(flat, "markdown")
    assert "12 rows compare one boot with one boot" in text
    assert boots.ONE_BOOT not in text  # said once for all rows, not once per row

"""`vmtax compare --by group`: an inventory's groups compared as pools of hosts, with hosts as
the unit (each host's runs averaged into its mean, Welch's t on the log host means)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vmtax.errors import UsageError
from vmtax.report import compare_format
from vmtax.stats.compare import compare
from vmtax.stats.compare_options import CompareOptions

BY_GROUP = CompareOptions(by="group", resamples=999)


def fleet(rng, hosts: dict[str, int], *, slower: float = 1.0, host_sd=0.05, run_sd=0.01, runs=4):
    """Runs of one probe on hosts of inventory groups (``hosts``: group -> host count); each
    host draws its own effect, and group ``kvm`` is ``slower`` times the others."""
    cols: dict[str, list] = {k: [] for k in ("config", "labels", "configuration_id", "mean")}
    cid = 0
    for group, count in hosts.items():
        for h in range(count):
            cid += 1
            labels = {"host": f"{group}{h}", "group": group}
            effect = host_sd * rng.standard_normal() + (np.log(slower) if group == "kvm" else 0)
            values = 100 * np.exp(effect + run_sd * rng.standard_normal(runs))
            cols["config"] += [f"L0 group={group} host={group}{h}"] * runs
            cols["labels"] += [labels] * runs
            cols["configuration_id"] += [cid] * runs
            cols["mean"] += list(values)
    n = len(cols["mean"])
    return pd.DataFrame(cols).assign(
        probe="syscall", level="L0", status="ok", experiment_id=1, better="lower", unit="ns",
        throughput_unit=None, wall_s=0.5, run_index=[i % runs for i in range(n)],
        boot=None,
    )  # fmt: skip


@pytest.mark.fast
def test_a_group_is_its_hosts_means_and_the_interval_is_behrens_fishers_on_them():
    rng = np.random.default_rng(5)
    # (a 10% tax, with 5% host effects, is found by Welch's df in this draw but not by the
    # Behrens-Fisher quantile, which is conservative: 0.014-0.028 false verdicts at 2 vs 5)
    runs = fleet(rng, {"bare": 4, "kvm": 5}, slower=1.2)
    comp = compare(runs, "group=bare", options=BY_GROUP)
    rows = comp.rows.set_index("config")
    assert list(rows.index) == ["group=bare", "group=kvm"]
    kvm = rows.loc["group=kvm"]
    assert kvm.boots == 5 and kvm.n_runs == 20  # five hosts, their twenty runs
    # Independently: the ratio of the groups' means of host means and its log's delta-method
    # variance, from numpy. 5 hosts against 4 are unequal units a side, where Welch-
    # Satterthwaite's degrees of freedom are anti-conservative (docs/statistics.md, "Unequal
    # boots a side"): the quantile is Behrens-Fisher's, sqrt(w) T(4) + sqrt(1 - w) T(3),
    # here drawn by Monte Carlo (the exact integral is vmtax's).
    means = runs.groupby("config")["mean"].mean()
    kvm_m = means[means.index.str.contains("group=kvm")].to_numpy()
    bare_m = means[means.index.str.contains("group=bare")].to_numpy()
    v = [x.var(ddof=1) / (x.size * x.mean() ** 2) for x in (kvm_m, bare_m)]
    w = v[0] / sum(v)
    draws = np.random.default_rng(0).standard_t([4, 3], (400_000, 2))
    mix = np.abs(np.sqrt(w) * draws[:, 0] + np.sqrt(1 - w) * draws[:, 1])
    est = kvm_m.mean() / bare_m.mean()
    half = np.quantile(mix, 0.95) * np.sqrt(sum(v))
    want = (est * np.exp(-half), est * np.exp(half))
    assert kvm.overhead == pytest.approx(est, rel=1e-12)
    assert (kvm.ci_low, kvm.ci_high) == pytest.approx(want, rel=2e-3)
    assert kvm.verdict == "slower"
    text = compare_format.render_comparison(comp, "markdown")
    header = next(line for line in text.splitlines() if line.startswith("|"))
    assert "hosts" in header and "between-host" in header and "boots" not in header
    assert comp.to_json()["by"] == "group"


@pytest.mark.fast
def test_a_group_of_one_host_gives_no_verdict_and_says_why():
    # One host a side is one boot a side: the host's own effect is unknown, so no verdict.
    rng = np.random.default_rng(6)
    comp = compare(fleet(rng, {"bare": 3, "kvm": 1}, slower=1.5), "group=bare", options=BY_GROUP)
    kvm = comp.rows.set_index("config").loc["group=kvm"]
    assert kvm.verdict == "one host" and not np.isfinite(kvm.p_value)
    assert "no verdict: group=kvm measured in one host" in kvm.warnings
    assert "boot" not in kvm.warnings


@pytest.mark.fast
def test_runs_without_the_label_are_left_out_and_a_label_nobody_has_is_one_line():
    rng = np.random.default_rng(7)
    runs = fleet(rng, {"bare": 3, "kvm": 3})
    lone = runs.iloc[:4].assign(labels=[{"host": "x"}] * 4, config="L0 host=x")
    comp = compare(pd.concat([runs, lone], ignore_index=True), "group=bare", options=BY_GROUP)
    assert "4 runs have no label group; left out" in comp.warnings
    with pytest.raises(UsageError, match="--by rack: no run has a label rack"):
        compare(runs, "group=bare", options=CompareOptions(by="rack"))
    with pytest.raises(UsageError, match="--by takes a label's name"):
        CompareOptions(by="group;rm")


@pytest.mark.slow
def test_the_host_level_interval_covers_the_truth_95_percent_of_the_time():
    # Hosts differ (5% sd) far more than runs on one host (1%): an interval that took the
    # pooled runs as its unit would cover about half the time, not 95%.
    rng = np.random.default_rng(8)
    trials, covered = 300, 0
    for _ in range(trials):
        comp = compare(fleet(rng, {"bare": 4, "kvm": 5}, slower=1.1), "group=bare",
                       options=BY_GROUP)  # fmt: skip
        kvm = comp.rows.set_index("config").loc["group=kvm"]
        covered += kvm.ci_low <= 1.1 <= kvm.ci_high
    assert 0.91 <= covered / trials <= 0.985, covered / trials


@pytest.fixture
def cli_agent():
    from vmtax.targets.base import find_agent

    return str(find_agent())


@pytest.mark.slow
def test_a_report_of_several_hosts_compares_groups_when_asked_and_otherwise_describes_them(
    cli, sqlite_url, tmp_path, monkeypatch
):
    # Four "hosts": this machine measured four times with host and group labels, as an
    # inventory's hosts are labelled. No one of them is the baseline by default: the report
    # says so instead of failing on an ambiguous level=L0.
    monkeypatch.setenv("VMTAX_RUN_REPORT", "none")
    for host, group in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")):
        res = cli("run", "--probe", "syscall", "--runs", "2", "--label", f"host={host}",
                  "--label", f"group={group}", "--db", sqlite_url)  # fmt: skip
        assert res.returncode == 0, res.stderr
    exps = ["exp=1", "exp=2", "exp=3", "exp=4"]
    plain = cli("report", *exps, "--db", sqlite_url, "-o", str(tmp_path / "r.html"))
    assert plain.returncode == 0, plain.stderr
    page = (tmp_path / "r.html").read_text()
    assert "has 4 configurations (hosts), so nothing is compared" in page
    pooled = cli("report", *exps, "--by", "group", "--baseline", "group=a", "--db", sqlite_url,
                 "-o", str(tmp_path / "g.html"))  # fmt: skip
    assert pooled.returncode == 0, pooled.stderr
    assert "group=b" in (tmp_path / "g.html").read_text()
    table = cli("compare", *exps, "--by", "group", "--baseline", "group=a", "--format", "json",
                "--db", sqlite_url)  # fmt: skip
    rows = json.loads(table.stdout)["rows"]
    assert [(r["config"], r["boots"]) for r in rows if r["probe"] == "syscall"] == [
        ("group=a", 2),
        ("group=b", 2),
    ]
    both = cli("compare", *exps, "--by", "group", "--baseline", "level=L0", "--db", sqlite_url)
    assert both.returncode == 2 and "spans 2 values of group" in both.stderr

"""Recursive DVH (study C, section 3.5): the guest hypervisors pass the virtual hardware's
configuration down before the run, and during it L0 alone serves the deepest VM's device
kicks, timers, IPIs and idle. So an exit served by DVH costs at depth 3 and 4 what it costs
the nested VM, a_k + x_k; the Hypercall, which DVH does not serve, multiplies as without it.
A synthetic dataset with known per-exit costs is recovered exactly, and the depth-3/4 figures
follow that derivation (docs/model.md, "Recursive DVH")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vmtax.model import Series, fit

pytestmark = pytest.mark.fast

NULL = 1000.0  # cycles of one null exit (Hypercall at the VM): the cost of each caused exit
# benchmark: (a_k, m_k, x_k) in cycles, exits, cycles
KNOWN = {
    "Hypercall": (NULL, 30.0, None),
    "DevNotify": (4000.0, 34.0, 6000.0),
    "ProgramTimer": (2000.0, 32.0, 1000.0),
    "SendIPI": (3000.0, 28.0, 2000.0),
}
M_H = float(np.mean([m for _, m, _ in KNOWN.values()]))


def _csv() -> str:
    lines = ["benchmark,config,cycles"]
    for bench, (a, m, x) in KNOWN.items():
        dvh = a + m * NULL if x is None else a + x  # the Hypercall is forwarded under DVH too
        lines += [f"{bench},VM,{a:.0f}", f"{bench},nested VM,{a + m * NULL:.0f}"]
        lines.append(f"{bench},nested VM + DVH,{dvh:.0f}")
    return "\n".join(lines) + "\n"


def test_a_synthetic_dataset_recovers_its_per_exit_costs_and_dvh_stays_flat(
    cli, monkeypatch, tmp_path
):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    from vmtax.model.sources import from_dataset
    from vmtax.refs import datasets

    folder = datasets.user_dir()
    folder.mkdir(parents=True)
    (folder / "dvh_known.csv").write_text(_csv())
    result = fit(from_dataset("dvh_known"))
    p = result.params
    got = {(r.benchmark, r.parameter.split(" ")[0]): r.estimate for r in p.itertuples()}
    for bench, (a, m, x) in KNOWN.items():
        assert got[(bench, "a")] == pytest.approx(a)
        assert got[(bench, "m")] == pytest.approx(m)
        if x is not None:
            assert got[(bench, "x")] == pytest.approx(x)
    assert got[("all", "m_h")] == pytest.approx(M_H)

    rows = json.loads(cli("model", "--dataset", "dvh_known", "--format", "json").stdout)
    at = {(r["benchmark"], r["level"], r["dvh"]): r["predicted"] for r in rows}
    for bench, (a, m, x) in KNOWN.items():
        for depth in (3, 4):
            nested = a + m * NULL * sum(M_H**i for i in range(depth - 1))
            assert at[(bench, depth, False)] == pytest.approx(nested)
            # Served by L0 at any depth: no term per level below; the Hypercall is not.
            want = nested if x is None else a + x
            assert at[(bench, depth, True)] == pytest.approx(want)


def test_dvh_from_measured_runs_is_the_nested_dvh_level_with_its_spread():
    """With runs, the DVH what-if at depth 3 and 4 is the nested VM + DVH level's mean, its
    interval that of one future run there (wider than the mean's), the same at both depths."""
    rng = np.random.default_rng(3)

    def runs(mean: float) -> np.ndarray:
        return mean * rng.lognormal(0.0, 0.05, 6)

    series = [
        Series(b, "cycles", runs(a), runs(a + m * NULL), dvh_nested=runs(a + x) if x else None)
        for b, (a, m, x) in KNOWN.items()
    ]
    preds = fit(series).predictions
    for s in series[1:]:
        rows = preds[(preds.benchmark == s.benchmark) & preds.dvh & (preds.level > 2)]
        assert len(rows) == 2
        assert rows["predicted"].tolist() == pytest.approx([s.dvh_nested.mean()] * 2)
        assert rows["low"].nunique() == 1 and rows["high"].nunique() == 1
        low, high = float(rows["low"].iloc[0]), float(rows["high"].iloc[0])
        sd = s.dvh_nested.std(ddof=1)
        assert high - low > 2 * 1.96 * sd / np.sqrt(6)  # more than the mean's interval
        assert low < s.dvh_nested.mean() < high

"""How often the gate trips: `--fail-on any` on synthetic A/A comparisons of three probes
trips in no more jobs than the verdicts' 5% allows, and on a 5% tax in most of them.

Each family is one `vmtax compare` (Welch's t, Holm, noise band ±2%) of L0 against L1, 8 runs
a side, each run drawing its own 3% effect; the geomean row is judged with the probes'."""

from __future__ import annotations

import pytest
from scipy import stats

from vmtax.gate.judge import judge
from vmtax.gate.rule import Rule
from vmtax.stats.compare import compare
from vmtax.testing.runs import Config, runs_frame

pytestmark = pytest.mark.slow

RULE = Rule(frozenset({"slower", "faster"}))


def tripped(factor: float, families: int, offset: int) -> int:
    count = 0
    for seed in range(offset, offset + families):
        runs, _ = runs_frame(
            [Config("L0"), Config("L1", {"set": "b"}, factor)],
            probes=("cpuid", "syscall", "timer"),
            runs=8,
            iterations=50,
            run_sigma=0.03,
            seed=seed,
        )
        comp = compare(runs, "level=L0", test="welch")
        rows = [{str(k): v for k, v in r.items()} for r in comp.rows.to_dict("records")]
        count += judge(rows, RULE).failed
    return count


def test_an_aa_trips_the_gate_at_most_at_the_verdicts_level():
    # 2 of 200 here. Above the 99.9% point of Binomial(200, 0.05) (21) fails: raw p-values
    # (no Holm) or no noise band would trip it in about 3 probes x 5% of the families.
    found = tripped(1.0, 200, 0)
    assert found <= stats.binom.ppf(0.999, 200, 0.05), found


def test_a_five_percent_tax_trips_it_in_most_jobs():
    # 179 of 200 here (90%); 50 families, at least 35 required.
    assert tripped(1.05, 50, 1000) >= 35

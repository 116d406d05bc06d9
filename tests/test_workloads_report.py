"""Study C's application table: the best of the run averages, normalised the study's way
(rates: configuration / baseline; times: baseline / configuration), beside its native
figures."""

from __future__ import annotations

import pandas as pd
import pytest

from vmtax.report.apps import study_c_table
from vmtax.stats.studyc import normalized, reference

pytestmark = pytest.mark.fast


def runs() -> pd.DataFrame:
    rows = []
    for config, rr, hb in (("L0", (100.0, 120.0), (2.0, 1.5)), ("L1", (50.0, 60.0), (3.0, 6.0))):
        rows += [
            {
                "probe": "net.rr",
                "config": config,
                "throughput": t,
                "mean": 1e9 / t,
                "unit": "ns",
                "throughput_unit": "trans/s",
            }
            for t in rr
        ]
        rows += [
            {
                "probe": "hackbench",
                "config": config,
                "throughput": None,
                "mean": m,
                "unit": "s",
                "throughput_unit": None,
            }
            for m in hb
        ]
    rows.append(
        {
            "probe": "cpuid",
            "config": "L0",
            "throughput": 1.0,
            "mean": 1.0,
            "unit": "cycles",
            "throughput_unit": None,
        }
    )
    return pd.DataFrame(rows)


def test_best_run_average_normalised_like_study_c():
    frame = normalized(runs(), "L0").set_index(["entry", "config"])
    assert set(frame.index.get_level_values(0)) == {"net.rr", "hackbench"}
    # rate: the best (highest) run, L1 / L0
    assert frame.loc[("net.rr", "L0"), "best"] == 120.0
    assert frame.loc[("net.rr", "L1"), "normalized"] == pytest.approx(60 / 120)
    # time: the best (lowest) run, L0 / L1
    assert frame.loc[("hackbench", "L1"), "best"] == 3.0
    assert frame.loc[("hackbench", "L1"), "normalized"] == pytest.approx(1.5 / 3.0)
    assert frame.loc[("hackbench", "L0"), "study_native"] == 10.36


def test_the_report_table_and_its_reference_rows():
    ref = reference()
    assert set(ref["benchmark"]) >= {"netperf RR", "Apache", "memcached", "MySQL", "hackbench"}
    tables = study_c_table(runs(), ["L0"])
    assert len(tables) == 1 and "study C" in tables[0].title
    cells = {(r[0], r[1]): r for r in tables[0].rows}
    assert cells[("netperf RR", "L1")][3] == "0.500"
    assert cells[("netperf RR", "L0")][4].startswith("45,578")
    assert study_c_table(runs()[runs()["probe"] == "cpuid"], ["L0"]) == []
    assert study_c_table(runs(), []) == []

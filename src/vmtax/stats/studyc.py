"""Study C's application table: per benchmark, the best of the run averages at each
configuration, normalised to the baseline the study's way (VM / native for rate metrics,
native / VM for time metrics; 1.0 = no overhead), beside the study's own native figures.

The study's benchmarks map to suite entries (``refs/data/dvh2020_apps.csv``, column
``entry``): ``net.rr``, ``http.file41k``, ``oltp.mariadb`` ... as ``apps-quick`` names them.
For oltp the study timed a fixed amount of work (s); vmtax runs for a fixed time and keeps
transactions/s, so that row uses the rate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vmtax.refs import datasets

#: The reference dataset of study C's applications (``vmtax refs show dvh2020_apps``).
DATASET = "dvh2020_apps"


def reference() -> pd.DataFrame:
    """Study C's benchmarks, the suite entry each maps to, and the study's native figures."""
    ref = datasets.load(DATASET)  # cells as published: text
    return ref.assign(native=pd.to_numeric(ref["native"]))


def normalized(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per study benchmark and configuration present in ``runs`` (ok runs with the
    columns probe, config, throughput, mean): best run average, and the study's ratio to
    the ``baseline`` configuration."""
    out = []
    ref = reference()
    for benchmark, entry, metric, native, study_unit, study_setup in zip(
        ref["benchmark"], ref["entry"], ref["metric"], ref["native"], ref["unit"],
        ref["study_setup"], strict=True,
    ):  # fmt: skip
        sub = runs[runs["probe"] == entry]
        if sub.empty:
            continue
        # oltp's stored value is a latency per transaction; its rate is the throughput.
        rate = metric == "rate" or entry.startswith("oltp")
        col = "throughput" if rate else "mean"
        best = sub.groupby("config")[col].agg("max" if rate else "min")
        base = best.get(baseline, np.nan)
        for config, value in best.items():
            ratio = value / base if rate else base / value
            out.append(
                {
                    "benchmark": benchmark,
                    "entry": entry,
                    "config": config,
                    "best": float(value),
                    "unit": _unit(sub) if rate else str(sub["unit"].iloc[0]),
                    "normalized": float(ratio),
                    "study_native": float(native),
                    "study_unit": study_unit,
                    "study_setup": study_setup,
                }
            )
    return pd.DataFrame(out)


def _unit(sub: pd.DataFrame) -> str:
    units = [u for u in sub.get("throughput_unit", pd.Series(dtype=str)) if isinstance(u, str)]
    return units[0] if units else ""

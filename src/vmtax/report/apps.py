"""The study-C application table of the report (numbers from vmtax.workloads.studyc)."""

from __future__ import annotations

import pandas as pd

from vmtax.report.analysis import Table, _fmt
from vmtax.workloads.studyc import normalized


def study_c_table(ok_runs: pd.DataFrame, baseline_configs: list[str]) -> list[Table]:
    """[] unless the runs hold one of study C's application benchmarks and a baseline."""
    if not baseline_configs:
        return []
    frame = normalized(ok_runs, baseline_configs[0])
    if frame.empty:
        return []
    rows = [
        [
            str(r.benchmark),
            str(r.config),
            f"{_fmt(r.best)} {r.unit}",
            "-" if pd.isna(r.normalized) else f"{r.normalized:.3f}",
            f"{_fmt(r.study_native)} {r.study_unit}",
        ]
        for r in frame.itertuples(index=False)
    ]
    return [
        Table(
            title="Application benchmarks (study C)",
            columns=[
                "Benchmark",
                "Configuration",
                "Best run average",
                "Normalized",
                "Study C native",
            ],
            rows=rows,
            numeric=[False, False, True, True, True],
            note=f"Normalized as study C does: configuration ÷ {baseline_configs[0]} for rates, "
            "the inverse for times (1.0 = no overhead), from the best of the run averages. "
            "Study C's native figures are its 4-core machine's, for scale only.",
        )
    ]

"""The study-C application table of the report (numbers from vmtax.stats.studyc)."""

from __future__ import annotations

import pandas as pd

from vmtax.report.parts import Table
from vmtax.report.terminal import fmt
from vmtax.stats.studyc import normalized


def study_c_table(ok_runs: pd.DataFrame, baseline_configs: list[str]) -> list[Table]:
    """[] unless the runs hold one of study C's application benchmarks and a baseline."""
    if not baseline_configs:
        return []
    frame = normalized(ok_runs, baseline_configs[0])
    if frame.empty:
        return []
    rows = [
        [
            str(benchmark),
            str(config),
            f"{fmt(best)} {unit}",
            "-" if pd.isna(ratio) else f"{ratio:.3f}",
            f"{fmt(study_native)} {study_unit}",
        ]
        for benchmark, config, best, unit, ratio, study_native, study_unit in zip(
            frame["benchmark"],
            frame["config"],
            frame["best"],
            frame["unit"],
            frame["normalized"],
            frame["study_native"],
            frame["study_unit"],
            strict=True,
        )
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

"""Put a reference dataset beside measured configurations: one long table of levels with
their mean, ΔL(n−1) and StdErr%, measured rows first, then the published rows."""

from __future__ import annotations

import pandas as pd

from vmtax.errors import UsageError
from vmtax.refs import datasets

COLUMNS = ["source", "series", "level", "mean", "unit", "delta_prev_pct", "stderr_pct"]


def beside(rows: pd.DataFrame, dataset: str, where: dict[str, str]) -> pd.DataFrame:
    """``rows`` are ``Comparison.rows``; ``where`` filters the dataset (e.g. arch=x86_64)."""
    ref = datasets.load_studya(dataset)
    for key, value in where.items():
        if key not in ref.columns:
            raise UsageError(
                f"--ref-where: {dataset} has no column {key!r} "
                f"(columns: {', '.join(datasets.KEY_COLUMNS)})"
            )
        ref = ref[ref[key].str.casefold() == value.casefold()]
    if ref.empty:
        raise UsageError(f"--ref-where selects no row of {dataset}")
    out = []
    measured = rows[rows["probe"] != "geomean"]
    for rec in measured.to_dict(orient="records"):
        out.append(
            {
                "source": "measured",
                "series": f"{rec['probe']} {rec['metric']}",
                "level": rec["config"],
                "mean": rec["mean"],
                "unit": rec["unit"],
                "delta_prev_pct": rec["delta_prev_pct"],
                "stderr_pct": rec["stderr_pct"],
            }
        )
    for rec in ref.to_dict(orient="records"):
        series = (
            f"table {rec['table']} {rec['test']} {rec['arch']} overcommitted={rec['overcommitted']}"
        )
        for metric, mean_col, unit in (("tpsec", "tpsec", "events/s"), ("resp", "resp_ms", "ms")):
            out.append(
                {
                    "source": dataset,
                    "series": f"{series} {metric}",
                    "level": rec["level"],
                    "mean": _f(rec[mean_col]),
                    "unit": unit,
                    "delta_prev_pct": _f(rec[f"{metric}_delta_pct"]),
                    "stderr_pct": _f(rec[f"{metric}_stderr_pct"]),
                }
            )
    return pd.DataFrame(out, columns=COLUMNS)


def _f(text: str) -> float:
    return float(text) if str(text).strip() else float("nan")

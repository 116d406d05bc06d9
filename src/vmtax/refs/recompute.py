"""Recompute a study-A table's derived columns from its own inputs and flag misprints.

Study A prints, per level, a mean and its standard error, and derives two figures from them:
ΔL(n−1) = (x_Ln − x_L(n−1)) / x_L(n−1) in percent, and StdErr% = StdErr / mean in percent.
Every printed number is rounded, so the check is done on intervals:

- an input printed with k decimals stands for any value within ±0.5·10^−k of it; the derived
  figure's possible values form an interval (both formulas are monotone in each input, so the
  interval's ends come from the inputs' ends);
- a published figure with k decimals agrees when that interval meets
  [published − 0.5·10^−k, published + 0.5·10^−k].

A figure that only agrees if its author truncated instead of rounding is marked ``truncated``
and is not flagged: it is a rounding convention, not a wrong number. Anything else is a
``misprint``: no rounding of the inputs and no rounding convention of the output explains it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vmtax.refs.datasets import KEY_COLUMNS

METRICS = {"tpsec": "tpsec", "resp": "resp_ms"}  # metric prefix -> mean column
CHAIN = ["table", "test", "overcommitted", "arch"]


def decimals(text: str) -> int:
    text = text.strip()
    return len(text.split(".", 1)[1]) if "." in text else 0


def interval(text: str) -> tuple[float, float]:
    """The values a number printed as ``text`` may stand for."""
    half = 0.5 * 10.0 ** -decimals(text)
    value = float(text)
    return value - half, value + half


def _truncation_interval(text: str) -> tuple[float, float]:
    unit = 10.0 ** -decimals(text)
    value = float(text)
    if text.strip().startswith("-"):
        return value - unit, value
    return value, value + unit


def _meets(a: tuple[float, float], b: tuple[float, float]) -> bool:
    # A tiny slack absorbs binary floating-point error at exact interval ends.
    eps = 1e-9 * max(1.0, abs(a[0]), abs(b[0]))
    return a[0] <= b[1] + eps and b[0] <= a[1] + eps


def _status(published: str, possible: tuple[float, float]) -> str:
    if _meets(possible, interval(published)):
        return "ok"
    if _meets(possible, _truncation_interval(published)):
        return "truncated"
    return "misprint"


def _delta(prev: str, cur: str) -> tuple[float, tuple[float, float]]:
    a_lo, a_hi = interval(prev)
    b_lo, b_hi = interval(cur)
    exact = 100.0 * (float(cur) - float(prev)) / float(prev)
    if a_lo <= 0:
        return exact, (-math.inf, math.inf)
    return exact, (100.0 * (b_lo / a_hi - 1.0), 100.0 * (b_hi / a_lo - 1.0))


def _pct(stderr: str, mean: str) -> tuple[float, tuple[float, float]]:
    s_lo, s_hi = interval(stderr)
    m_lo, m_hi = interval(mean)
    exact = 100.0 * float(stderr) / float(mean) if float(mean) else math.nan
    if m_lo <= 0:
        return exact, (-math.inf, math.inf)
    return exact, (100.0 * max(s_lo, 0.0) / m_hi, 100.0 * s_hi / m_lo)


def _level(text: str) -> int:
    return int(text[1:])


def check(df: pd.DataFrame) -> pd.DataFrame:
    """One row per derived cell: its key, column, published text, recomputed value, the
    interval the inputs allow, and ``status`` (ok | truncated | misprint | missing)."""
    out = []
    for _, chain in df.groupby(CHAIN, sort=False):
        chain = chain.assign(_n=chain["level"].map(_level)).sort_values("_n", kind="stable")
        prev = None
        for _, row in chain.iterrows():
            for metric, mean_col in METRICS.items():
                cells = [(f"{metric}_stderr_pct", _pct(row[f"{metric}_stderr"], row[mean_col]))]
                if prev is not None:
                    cells.append((f"{metric}_delta_pct", _delta(prev[mean_col], row[mean_col])))
                for column, (exact, possible) in cells:
                    published = str(row[column]).strip()
                    rec = {k: row[k] for k in KEY_COLUMNS}
                    rec.update(
                        column=column,
                        published=published,
                        recomputed=exact,
                        low=possible[0],
                        high=possible[1],
                        decimals=decimals(published) if published else None,
                        status=_status(published, possible) if published else "missing",
                    )
                    out.append(rec)
            prev = row
    return pd.DataFrame(
        out,
        columns=[
            *KEY_COLUMNS,
            "column",
            "published",
            "recomputed",
            "low",
            "high",
            "decimals",
            "status",
        ],
    )


def misprints(df: pd.DataFrame) -> pd.DataFrame:
    """Only the flagged cells of :func:`check`."""
    checked = check(df)
    return checked[checked["status"] == "misprint"].reset_index(drop=True)


def side_by_side(df: pd.DataFrame) -> pd.DataFrame:
    """The dataset in its own row order with each derived column followed by the recomputed
    value and its check: ``<col>``, ``<col>_recomputed``, ``<col>_check``."""
    checked = check(df).set_index([*KEY_COLUMNS, "column"])
    rows = []
    for _, row in df.iterrows():
        rec: dict[str, object] = {k: row[k] for k in KEY_COLUMNS}
        for metric, mean_col in METRICS.items():
            rec[mean_col] = row[mean_col]
            for suffix in ("delta_pct", "stderr", "stderr_pct"):
                column = f"{metric}_{suffix}"
                rec[column] = row[column]
                if suffix == "stderr":
                    continue
                key = (*(row[k] for k in KEY_COLUMNS), column)
                if key in checked.index:
                    hit = checked.loc[key]
                    rec[f"{column}_recomputed"] = float(hit["recomputed"])
                    rec[f"{column}_check"] = str(hit["status"])
                else:
                    rec[f"{column}_recomputed"] = np.nan
                    rec[f"{column}_check"] = ""
        rows.append(rec)
    return pd.DataFrame(rows)

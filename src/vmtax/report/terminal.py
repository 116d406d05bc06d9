"""The study-A table for the terminal, from ``vmtax.stats.describe.describe`` output.

Formatting only: every number is computed in stats.describe.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
from rich.table import Table


def studya_table(
    described_df: pd.DataFrame, title: str | None = None, width: int | None = None
) -> Table:
    """Per probe: throughput (where it has one), mean response time, StdErr, StdErr%, p95, n.

    A ``Config`` column appears when more than one configuration is shown. Given the
    ``width`` it is printed in (a terminal's), a table that would not fit is made narrower
    without cutting a number: numbers of 100,000 and more in engineering notation (4
    significant digits, 1.535M), headers on two lines, and the text columns (probe, unit,
    a throughput's unit) wrapped; every number column keeps its whole width.
    """
    table = _studya_table(described_df, title, fmt)
    if width is not None and _natural_width(table) > width:
        table = _studya_table(described_df, title, fmt_short, narrow=True)
    return table


def _natural_width(table: Table) -> int:
    """The width ``table`` takes unwrapped: its widest cells, padding and rules."""
    widths = [
        max([len(str(c)) for c in column._cells] + [len(str(column.header))])
        for column in table.columns
    ]
    return sum(widths) + 3 * len(widths) + 1


def _studya_table(
    described_df: pd.DataFrame,
    title: str | None,
    number: Callable[[object], str],
    narrow: bool = False,
) -> Table:
    several = described_df["config"].nunique() > 1 if len(described_df) else False
    table = Table(title=title, header_style="bold")
    # Numbers never wrap nor shrink (no ellipsis inside a number); text wraps when narrow.
    num: dict[str, Any] = {"justify": "right", "no_wrap": True}
    text: dict[str, Any] = {"overflow": "fold"} if narrow else {}
    if several:
        table.add_column("Config", **text)
    table.add_column("Probe", **text)
    table.add_column("Throughput", justify="right", overflow="fold" if narrow else "ellipsis")
    table.add_column("Std\nErr%" if narrow else "StdErr%", **num)
    # Study A's column is a response time; a rate such as crypto's MB/s is only a mean.
    times = described_df["unit"].astype(str).isin(TIME_UNITS).all() if len(described_df) else True
    mean = "Resp. mean" if times else "Mean"
    table.add_column(mean.replace(" ", "\n") if narrow else mean, **num)
    table.add_column("Std\nErr" if narrow else "StdErr", **num)
    table.add_column("Std\nErr%" if narrow else "StdErr%", **num)
    table.add_column("p95", **num)
    table.add_column("Unit", **text)
    table.add_column("n", **num)
    fmt = number
    d = described_df
    for (
        config, probe, throughput_mean, throughput_unit, throughput_stderr_pct, resp_mean,
        resp_stderr, resp_stderr_pct, p95, unit, n_runs,
    ) in zip(
        d["config"], d["probe"], d["throughput_mean"], d["throughput_unit"],
        d["throughput_stderr_pct"], d["resp_mean"], d["resp_stderr"], d["resp_stderr_pct"],
        d["p95"], d["unit"], d["n_runs"], strict=True,
    ):  # fmt: skip
        thr = (
            f"{fmt(throughput_mean)} {throughput_unit or ''}".rstrip()
            if _present(throughput_mean)
            else "-"
        )
        cells = [
            probe,
            thr,
            pct(throughput_stderr_pct) if _present(throughput_mean) else "-",
            fmt(resp_mean),
            fmt(resp_stderr),
            pct(resp_stderr_pct),
            fmt(p95),
            str(unit),
            str(n_runs),
        ]
        table.add_row(*([str(config)] if several else []), *cells)
    if p95_below_mean(described_df):
        table.caption = P95_NOTE
    return table


#: Units of a response time (or its cost in cycles), for the column's name.
TIME_UNITS = frozenset({"ns", "us", "µs", "ms", "s", "cycles", "tsc_cycles"})

#: Why a row can show a p95 below its mean (said wherever such a row is shown).
P95_NOTE = (
    "p95 is the mean of the runs' 95th percentiles and Resp. mean the mean of their means; "
    "a p95 below the mean means a few very slow iterations (under 5%) pull the mean up: "
    "the runs are skewed (see vmtax artifacts)."
)


def p95_below_mean(described_df: pd.DataFrame) -> bool:
    """Does any row have a p95 below its mean response time?"""
    if described_df.empty:
        return False
    p95 = pd.to_numeric(described_df["p95"], errors="coerce")
    mean = pd.to_numeric(described_df["resp_mean"], errors="coerce")
    return bool((p95 < mean).any())


def fmt(x: object) -> str:
    """Four significant digits, thousands separated; ``-`` for a missing value."""
    if not _present(x):
        return "-"
    v = float(x)  # type: ignore[arg-type]
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    digits = max(0, 3 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{digits}f}"


#: Engineering prefixes of the narrow table's numbers (powers of 1,000).
_PREFIXES = ("", "k", "M", "G", "T", "P", "E")


def fmt_short(x: object) -> str:
    """As :func:`fmt`, but 100,000 and more in engineering notation with 4 significant
    digits (150.2k, 1.535M): at most 6 characters for a number of any size."""
    if not _present(x) or abs(float(x)) < 100_000:  # type: ignore[arg-type]
        return fmt(x)
    v = float(x)  # type: ignore[arg-type]
    power = int(math.floor(math.log10(abs(v)))) // 3
    scaled = v / 1000.0**power
    if round(abs(scaled), max(0, 3 - int(math.floor(math.log10(abs(scaled)))))) >= 1000:
        power, scaled = power + 1, scaled / 1000.0  # 999,960 is 1.000M, not 1000k
    if power >= len(_PREFIXES):
        return f"{v:.3e}"
    digits = max(0, 3 - int(math.floor(math.log10(max(abs(scaled), 1.0)))))
    return f"{scaled:.{digits}f}{_PREFIXES[power]}"


def pct(x: object) -> str:
    return f"{float(x):.2f}%" if _present(x) else "-"  # type: ignore[arg-type]


def _present(x: object) -> bool:
    try:
        return x is not None and math.isfinite(float(x))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False

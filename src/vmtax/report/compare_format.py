"""Formatting for ``vmtax compare`` / ``refs`` / ``artifacts``: table, markdown, csv and json.

stats computes, this module only formats. ``csv`` and ``json`` carry full-precision numbers
(machine readable); ``table`` and ``markdown`` round for reading.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.table import Table

from vmtax.stats.boots import ONE_BOOT

if TYPE_CHECKING:
    from vmtax.stats.compare import Comparison

FORMATS = ("table", "markdown", "csv", "json")

_DISPLAY = [
    ("probe", "probe"),
    ("metric", "metric"),
    ("config", "config"),
    ("n_runs", "runs"),
    ("boots", "boots"),
    ("between_share", "between-boot % [95% CI]"),
    ("runs_per_boot", "runs/boot (K&J)"),
    ("mean", "mean"),
    ("unit", "unit"),
    ("delta_prev_pct", "ΔL(n−1) %"),
    ("stderr", "StdErr"),
    ("stderr_pct", "StdErr %"),
    ("overhead", "overhead"),
    ("ci", "95% CI"),
    ("p_value", "p"),
    ("p_adjusted", "p adj"),
    ("verdict", "verdict"),
]


def _num(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    if isinstance(x, int | bool):
        return str(x)
    x = float(x)
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    # Thousands separated from 1,000 on, as the study-A table (report.terminal.fmt) does:
    # one number format in every table ("3089" here and "3,089" there read as two numbers).
    return f"{x:,.{decimals}f}" if magnitude >= 3 else f"{x:.{decimals}f}"


def _count(x: Any) -> str:
    return str(int(x)) if isinstance(x, int | float) and math.isfinite(x) else ""


def fmt_p(x: Any) -> str:
    """A p-value as every output shows it (compare, report, markdown): one place, one rounding."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}"


def fmt_ratio(x: Any) -> str:
    """An overhead ratio as every output shows it."""
    if x is None or not math.isfinite(float(x)):
        return ""
    x = float(x)
    # Three decimals say 0.002 for both ends of a CI of 0.0014..0.0018: below 0.1, three
    # significant digits instead.
    return f"{x:.3g}" if 0 < abs(x) < 0.1 else f"{x:.3f}"


def fmt_ci(low: Any, high: Any) -> str:
    """A confidence interval of a ratio as every output shows it: ``[low, high]``."""
    if low is None or not math.isfinite(float(low)):
        return ""
    return f"[{fmt_ratio(low)}, {fmt_ratio(high)}]"


def _share(rec: Mapping[Any, Any]) -> str:
    """The between-boot share in percent with its interval (vmtax.stats.boots)."""
    share = _num(100.0 * rec["between_share"], 2)
    low, high = rec.get("share_low"), rec.get("share_high")
    if isinstance(low, float) and isinstance(high, float) and math.isfinite(low + high):
        return f"{share} [{_num(100.0 * low, 2)}, {_num(100.0 * high, 2)}]"
    return share


def comparison_display(rows: pd.DataFrame) -> pd.DataFrame:
    """The rounded, human-readable view of ``Comparison.rows``."""
    out = []
    for rec in rows.to_dict(orient="records"):
        ci = fmt_ci(rec["ci_low"], rec["ci_high"])
        out.append(
            {
                "probe": rec["probe"],
                "metric": rec["metric"],
                "config": rec["config"],
                "n_runs": str(rec["n_runs"]),
                "boots": str(rec["boots"]),
                "between_share": _share(rec),
                "runs_per_boot": _count(rec["runs_per_boot"]),
                "mean": _num(rec["mean"]),
                "unit": rec["unit"] or "",
                "delta_prev_pct": _num(rec["delta_prev_pct"], 3),
                "stderr": _num(rec["stderr"], 3),
                "stderr_pct": _num(rec["stderr_pct"], 3),
                "overhead": fmt_ratio(rec["overhead"]),
                "ci": ci,
                "p_value": fmt_p(rec["p_value"]),
                "p_adjusted": fmt_p(rec["p_adjusted"]),
                "verdict": rec["verdict"],
            }
        )

    return pd.DataFrame(out, columns=[k for k, _ in _DISPLAY])


def _headers(comp: Comparison) -> list[tuple[str, str]]:
    """The columns and their headings: a comparison pooled by a label counts hosts where
    another counts boots (its clusters are hosts)."""
    if not comp.by:
        return _DISPLAY
    named = {
        "boots": "hosts",
        "between_share": "between-host % [95% CI]",
        "runs_per_boot": "runs/host",
    }
    return [(k, named.get(k, head)) for k, head in _DISPLAY]


def comparison_table(comp: Comparison) -> Table:
    """A rich table of a Comparison, warnings as a caption."""
    view = comparison_display(comp.rows)
    table = Table(
        title=f"overhead vs baseline {comp.baseline} ({comp.test} test, "
        f"{comp.adjust} adjusted, noise ±{comp.noise:.0%})"
    )
    for key, head in _headers(comp):
        right = key not in ("probe", "metric", "config", "unit", "verdict")
        table.add_column(head, justify="right" if right else "left")
    for rec in view.to_dict(orient="records"):
        style = {"slower": "red", "faster": "green"}.get(rec["verdict"])
        table.add_row(*[str(rec[k]) for k, _ in _DISPLAY], style=style)
    notes = _notes(comp)
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"  # sentences, not titles: centred they read as a poem
    return table


def _notes(comp: Comparison) -> list[str]:
    notes = list(comp.warnings)
    one_boot = 0
    imprecise: list[str] = []
    for rec in comp.rows.to_dict(orient="records"):
        parts = [w for w in str(rec["warnings"] or "").split("; ") if w]
        one_boot += ONE_BOOT in parts
        if any(w.startswith(_IMPRECISE) for w in parts) and rec["probe"] != "geomean":
            imprecise.append(f"{rec['probe']} {rec['config']}")
        parts = [w for w in parts if w != ONE_BOOT and not w.startswith(_IMPRECISE)]
        if parts and rec["probe"] != "geomean":
            notes.append(f"{rec['probe']} {rec['metric']} {rec['config']}: {'; '.join(parts)}")
    if imprecise:
        # One note for them all: a row each repeated the same words, under verdicts of
        # "slower" too, which stand on the test and the interval (they count the runs there are).
        notes.insert(
            0,
            f"{len(imprecise)} rows missed adaptive sampling's precision target "
            f"({', '.join(imprecise)}): a slower or faster verdict stands on the test and "
            "the interval; a difference not detected reads imprecise, not ~",
        )
    if one_boot:
        notes.insert(
            0,
            f"{one_boot} rows compare one boot with one boot: their intervals and tests hold "
            "for these boots only (runs are the unit; measure more boots to generalise)",
        )
    return notes


#: How stats.compare starts the warning of a row that adaptive sampling left imprecise.
_IMPRECISE = "imprecise:"


def markdown(df: pd.DataFrame, headers: list[str] | None = None) -> str:
    """A GitHub-flavoured markdown table (pipes in cells escaped)."""
    heads = headers or [str(c) for c in df.columns]

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in heads) + " |",
        "|" + "|".join("---" for _ in heads) + "|",
    ]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def csv_text(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def render_comparison(comp: Comparison, fmt: str) -> str | Table:
    """The Comparison in one of FORMATS (a rich Table for ``table``)."""
    if fmt == "table":
        return comparison_table(comp)
    if fmt == "markdown":
        text = markdown(comparison_display(comp.rows), [h for _, h in _headers(comp)])
        notes = _notes(comp)
        if notes:
            text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
        return text
    if fmt == "csv":
        return csv_text(comp.rows)
    if fmt == "json":
        return json.dumps(comp.to_json(), indent=2, allow_nan=False) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def render_frame(df: pd.DataFrame, fmt: str, title: str = "") -> str | Table:
    """Any small frame (refs list/show/check, artifacts) in one of FORMATS."""
    if fmt == "csv":
        return csv_text(df)
    if fmt == "json":
        records = [
            {k: json_safe(v) for k, v in rec.items()} for rec in df.to_dict(orient="records")
        ]
        return json.dumps(records, indent=2, allow_nan=False) + "\n"
    shown = df.map(lambda v: _num(v) if isinstance(v, float) else ("" if v is None else str(v)))
    if fmt == "markdown":
        return (f"**{title}**\n\n" if title else "") + markdown(shown)
    if fmt == "table":
        table = Table(title=title or None)
        for col in shown.columns:
            table.add_column(str(col))
        for row in shown.itertuples(index=False):
            style = "bold red" if any(str(v) == "misprint" for v in row) else None
            table.add_row(*[str(v) for v in row], style=style)
        return table
    raise ValueError(f"unknown format {fmt!r}")


def json_safe(v: Any) -> Any:
    """A numpy scalar as a Python value; NaN and infinities as None."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v

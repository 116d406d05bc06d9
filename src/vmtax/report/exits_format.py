"""Study E's Table 2 shape as text: a rich table, markdown, CSV or JSON, from the long frame
``vmtax.hostprof.table.table2`` (or ``published``) computes. Nothing is computed here."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
from rich.table import Table

FORMATS = ("table", "markdown", "csv", "json")


def missing(value: Any) -> bool:  # noqa: ANN401
    """None or NaN: a cell with nothing to show."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _num(value: Any, digits: int = 3) -> str:  # noqa: ANN401
    if missing(value):
        return "–"
    return f"{float(value):.{digits}f}"


def _count(value: Any) -> str:  # noqa: ANN401
    if missing(value):
        return "–"
    v = float(value)
    return f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:,.1f}"


def _time(ns: Any) -> str:  # noqa: ANN401
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} ns"


def _cells(frame: pd.DataFrame, published: bool) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, body rows and the column legend of one probe's table."""
    columns = list(dict.fromkeys(frame["column"]))
    legend = [f"[{i}] {c}" for i, c in enumerate(columns, 1)]
    rows = list(dict.fromkeys(r for r in frame["row"] if r != "total")) + ["total"]
    by_key = {
        (c, r): rec
        for c, r, rec in zip(frame["column"], frame["row"], frame.to_dict("records"), strict=True)
    }
    header = ["reason", "group"]
    for i, _ in enumerate(columns, 1):
        header += (
            [f"[{i}] share"]
            if published
            else [f"[{i}] count", f"[{i}] time", f"[{i}] share", f"[{i}] /iter"]
        )
    body = []
    for r in rows:
        group = next((by_key[(c, r)]["group"] for c in columns if (c, r) in by_key), "")
        line = [str(r), str(group or "")]
        for c in columns:
            rec = by_key.get((c, r))
            if published:
                line.append(_num(rec["share"]) if rec else "–")
            elif rec is None:
                line += ["0", "–", "0.000", "0"]
            else:
                per = rec["per_iteration"]
                line += [
                    _count(rec["count"]),
                    _time(rec["time_ns"]),
                    _num(rec["share"]),
                    _num(per, 4),
                ]
        body.append(line)
    return header, body, legend


def render(
    frame: pd.DataFrame, fmt: str, *, title: str, notes: list[str], published: bool = False
) -> str | list[Any]:
    """``frame`` as text (markdown, csv, json) or a list of rich renderables (table)."""
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        keep = ["column", "probe", "recorded_at", "row", "group", "count", "time_ns", "share",
                "per_iteration", "per_iteration_raw", "startup", "runs", "iterations",
                "complete"]  # fmt: skip
        records = []
        for rec in frame[[k for k in keep if k in frame.columns]].to_dict("records"):
            out = {"config": rec.pop("column"), "reason": rec.pop("row"), **rec}
            records.append(
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
            )
        return json.dumps(records, indent=1, default=str) + "\n"
    probes = list(dict.fromkeys(frame["probe"])) if "probe" in frame.columns else [None]
    parts: list[Any] = []
    text = [f"# {title}\n"] if fmt == "markdown" else []
    for probe in probes:
        sub = frame if probe is None else frame[frame["probe"] == probe]
        header, body, legend = _cells(sub, published)
        heading = title if probe is None else f"{title} · probe {probe}"
        if fmt == "markdown":
            if probe is not None:
                text.append(f"\n## probe {probe}\n")
            text += [f"- {x}" for x in legend]
            text.append("")
            text.append("| " + " | ".join(header) + " |")
            text.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
            text += ["| " + " | ".join(c.replace("|", "\\|") for c in line) + " |" for line in body]
        else:
            table = Table(
                title=heading,
                caption="\n".join(legend),
                title_justify="left",
                caption_justify="left",
            )
            for i, h in enumerate(header):
                table.add_column(h, justify="left" if i < 2 else "right")
            for line in body:
                table.add_row(*line, style="bold" if line[0] == "total" else None)
            parts.append(table)
    if fmt == "markdown":
        text += [""] + [f"> {n}" for n in notes]
        return "\n".join(text) + "\n"
    return parts + notes

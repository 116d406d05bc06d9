"""`vmtax explain`'s decomposition as text: a rich table, markdown, CSV or JSON, from the
frame ``vmtax.explain.explain`` computes. Nothing is computed here."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from vmtax.report.compare_format import csv_text, fmt_p, json_safe, markdown, render_frame
from vmtax.report.exits_format import _time, missing

FORMATS = ("table", "markdown", "csv", "json")
#: The keys every JSON row carries first (the rest follow).
JSON_KEYS = ("config", "baseline", "probe", "group", "exits_per_op", "cost_ns", "share")


def _share(x: Any) -> str:  # noqa: ANN401
    if missing(x):
        return "–"
    return f"{100 * float(x):.1f}%"


def _exits(x: Any) -> str:  # noqa: ANN401
    if missing(x):
        return ""
    return f"{float(x):.3g}"


def summary(rows: pd.DataFrame) -> list[str]:
    """One line per probe: its overhead, the explained fraction with its interval, the top
    groups; absence of an overhead is "not detected (p = …)"."""
    out = []
    for probe, sub in rows.groupby("probe", sort=False):
        first = sub.iloc[0]
        sign = "" if first["overhead_ns"] >= 0 else "−"
        size = _time(abs(first["overhead_ns"]))
        head = f"{probe} at {first['config']} vs {first['baseline']}: overhead {sign}{size}/op"
        frac = first["explained"]
        if frac != frac:  # NaN: no overhead to split
            out.append(f"{head}; overhead not detected (p = {fmt_p(first['overhead_p'])}), "
                       "so no fraction is explained")  # fmt: skip
            continue
        if first["explained_low"] == first["explained_high"] == frac:
            span = "1 by construction (the round trip is calibrated on it)"
        elif first["explained_low"] != first["explained_low"]:
            span = f"{_share(frac)} (no interval: a sample has one run)"
        else:
            span = (f"{_share(frac)} [95% CI {_share(first['explained_low'])}, "
                    f"{_share(first['explained_high'])}]")  # fmt: skip
        if first["explained_low"] > 1:
            span += (
                ": the counted exits cost more than the overhead, so some of their cost is not "
                "on the operation's path (other vCPUs, work between operations) or the baseline "
                "pays it too"
            )
        groups = sub[sub["group"] != "residual"].head(2)
        top = ", ".join(
            f"{g.group} {_share(g.share)} ({g.top_reason})" for g in groups.itertuples()
        )
        out.append(f"{head} (p = {fmt_p(first['overhead_p'])}); exits explain {span}"
                   + (f"; top: {top}" if top else ""))  # fmt: skip
    return out


def render(rows: pd.DataFrame, fmt: str, title: str = "") -> str | Any:  # noqa: ANN401
    """The decomposition in one of FORMATS (a rich Table for ``table``)."""
    if fmt == "json":
        keys = [*JSON_KEYS, *(c for c in rows.columns if c not in JSON_KEYS)]
        records = [{k: json_safe(rec[k]) for k in keys} for rec in rows.to_dict(orient="records")]
        return json.dumps(records, indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return csv_text(rows)
    view = pd.DataFrame(
        {
            "probe": rows["probe"],
            "group": rows["group"],
            "exits/op": rows["exits_per_op"].map(_exits),
            "cost/exit": [
                _time(c) if g != "residual" else f"{'-' if c < 0 else ''}{_time(abs(c))}/op"
                for g, c in zip(rows["group"], rows["cost_ns"], strict=True)
            ],
            "share": rows["share"].map(_share),
            "top reason": rows["top_reason"],
            "cost per exit from": rows["cost_basis"],
        }
    )
    if fmt == "markdown":
        text = (f"**{title}**\n\n" if title else "") + markdown(view)
        return text + "\n" + "".join(f"- {line}\n" for line in summary(rows))
    return render_frame(view, "table", title)

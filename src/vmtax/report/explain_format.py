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
        if not (first["explained_low"] == first["explained_high"] == frac):
            out.append(_path_line(first))
    return out


def _path_line(first: Any) -> str:  # noqa: ANN401
    """The fraction on the measured path's vCPUs, or why there is none."""
    vcpus = str(first.get("path_vcpus") or "")
    frac = first.get("path_explained")
    if not vcpus:
        return (
            "  on the measured path: not split (the profile does not say which vCPU made each "
            "exit, or the run did not pin its client and server: --cpus)"
        )
    if missing(frac):
        return f"  on the measured path (vCPUs {vcpus}): no interval"
    return (
        f"  on the measured path (vCPUs {vcpus}: client, then server): {_share(frac)} "
        f"[95% CI {_share(first['path_explained_low'])}, "
        f"{_share(first['path_explained_high'])}]"
    )


def split_view(vcpus: pd.DataFrame) -> pd.DataFrame:
    """The split by vCPU as shown: per probe and vCPU, exits and their cost per operation."""
    return pd.DataFrame(
        {
            "probe": vcpus["probe"],
            "vCPU": vcpus["vcpu"].astype(int),
            "runs there": vcpus["role"],
            "exits/op": vcpus["exits_per_op"].map(_exits),
            "cost/op": vcpus["explained_ns"].map(_time),
            "share of overhead": vcpus["share"].map(_share),
        }
    )


def render_split(vcpus: pd.DataFrame, fmt: str, title: str = "") -> str | Any:  # noqa: ANN401
    """The split by vCPU in ``table`` or ``markdown``; "" when there is none."""
    if vcpus.empty:
        return ""
    view = split_view(vcpus)
    if fmt == "markdown":
        return (f"\n**{title}**\n\n" if title else "\n") + markdown(view)
    return render_frame(view, "table", title)


def render(
    rows: pd.DataFrame, fmt: str, title: str = "", vcpus: pd.DataFrame | None = None
) -> str | Any:  # noqa: ANN401
    """The decomposition in one of FORMATS (a rich Table for ``table``). In JSON and CSV
    each probe's residual row carries its split by vCPU (``by_vcpu``, a list of rows of
    ``vcpus``)."""
    rows = _with_split(rows, vcpus)
    if fmt == "json":
        keys = [*JSON_KEYS, *(c for c in rows.columns if c not in JSON_KEYS)]
        records = [{k: json_safe(rec[k]) for k in keys} for rec in rows.to_dict(orient="records")]
        return json.dumps(records, indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return csv_text(rows.assign(by_vcpu=[json.dumps(v) if v else "" for v in rows["by_vcpu"]]))
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
        split = render_split(vcpus if vcpus is not None else pd.DataFrame(), "markdown", "by vCPU")
        return text + "\n" + "".join(f"- {line}\n" for line in summary(rows)) + str(split)
    return render_frame(view, "table", title)


def _with_split(rows: pd.DataFrame, vcpus: pd.DataFrame | None) -> pd.DataFrame:
    """``rows`` with a ``by_vcpu`` column: each probe's split on its residual row."""
    by: dict[str, list[dict[str, Any]]] = {}
    if vcpus is not None and len(vcpus):
        for probe, sub in vcpus.groupby("probe", sort=False):
            keep = sub.drop(columns=["config", "probe"]).to_dict(orient="records")
            by[str(probe)] = [{str(k): json_safe(v) for k, v in r.items()} for r in keep]
    cells = [
        by.get(str(p), []) if g == "residual" else []
        for p, g in zip(rows["probe"], rows["group"], strict=True)
    ]
    return rows.assign(by_vcpu=pd.Series(cells, index=rows.index, dtype=object))

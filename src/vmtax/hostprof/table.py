"""Study E's Table 2 shape from stored exit profiles: rows are exit reasons (or groups),
columns are configurations; count and handling time per run, the time's share of the
baseline configuration's total, and exits per probe iteration.

A configuration recorded at several host levels (L3 is seen by L1's and by L2's KVM) gives
one column per recording level, labelled ``config @ Ln``.
"""

from __future__ import annotations

import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.groups import GROUPS
from vmtax.refs import datasets

#: Columns of ``table2()``, one row per (probe, column, reason or group), plus a ``total`` row.
COLUMNS = [
    "probe", "config", "recorded_at", "column", "row", "group", "count", "time_ns", "share",
    "per_iteration", "per_iteration_raw", "startup", "runs", "iterations", "complete",
]  # fmt: skip


def _column(config: str, recorded_at: str, several: bool) -> str:
    return f"{config} @ {recorded_at}" if several else config


def matches(config_key: str, recorded_at: str, selector: str, option: str = "--baseline") -> bool:
    """Whether a column matches ``KEY=VAL`` (``level=L2``, a label, ``recorded_at=L1``);
    ``option`` names the option the selector came from in the error."""
    key, sep, value = selector.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise UsageError(f"{option} must be KEY=VAL (e.g. level=L2), got {selector!r}")
    key, value = key.strip().lower(), value.strip()
    words = config_key.split()
    if key == "level":
        return bool(words) and words[0] == value.upper()
    if key == "recorded_at":
        return recorded_at == value.upper()
    if key == "config":
        return config_key == value
    return f"{key}={value}" in words[1:]


def table2(
    profiles: pd.DataFrame, *, by: str = "reason", baseline: str | None = None
) -> pd.DataFrame:
    """The Table 2 rows of ``profiles`` (``hostprof.store.exit_profiles``).

    Per column: ``count`` and ``time_ns`` are means per profiled run (``time_ns`` is NaN for
    profiles of KVM's counters, which have no time); ``share`` is
    ``time_ns`` over the baseline column's total time for the same probe (over its total
    count when nothing was timed); ``per_iteration`` is exits per probe iteration (warm-up
    included) once the exits of the agent's own start-up (``startup``, measured once per
    configuration; 0 when unknown) are taken off; ``per_iteration_raw`` keeps them.
    ``baseline`` (KEY=VAL) picks the baseline; default: the first column (lowest
    level). ``complete`` is false when any run's profile of that column was incomplete; the
    means are then over its complete profiles (over all of them when none is complete).
    """
    if by not in {"reason", "group"}:
        raise UsageError(f"--by must be reason or group, got {by!r}")
    if profiles.empty:
        return pd.DataFrame(columns=COLUMNS)
    df = profiles.copy()
    several = df.groupby("config_key")["recorded_at"].nunique().max() > 1
    df["column"] = [
        _column(c, r, several) for c, r in zip(df["config_key"], df["recorded_at"], strict=True)
    ]
    df["row"] = df["reason"] if by == "reason" else df["group"]
    out = []
    for probe, every in df.groupby("probe", sort=True):
        # A column's means are over its complete profiles: a run whose recording was lost
        # (its stop found none) has no exits to count, not zero exits. Only a column with no
        # complete profile at all is shown from its incomplete ones, marked so.
        whole = every.groupby("column")["complete"].transform("any")
        sub = every[every["complete"] | ~whole]
        runs = sub.drop_duplicates(["run_id", "recorded_at"])
        per_col = runs.groupby("column", sort=False).agg(
            runs=("run_id", "nunique"),
            iterations=("iterations", "sum"),
            complete=("complete", "all"),
            config=("config_key", "first"),
            recorded_at=("recorded_at", "first"),
            level=("level", "first"),
            counts_only=("recorder", lambda r: bool((r == "kvm-stats").all())),
        )
        per_col["complete"] = every.groupby("column", sort=False)["complete"].all()
        per_col = per_col.sort_values(["level", "recorded_at"], kind="stable")
        per_col.index.name = None
        counted = sub.dropna(subset=["row"])
        # One agent start-up's exits per profile (the same for every run of a column).
        counted = counted.assign(startup=counted.get("startup", 0))
        sums = counted.groupby(["column", "row"], sort=False).agg(
            count=("count", "sum"), time_ns=("time_ns", "sum"), group=("group", "first"),
            startup=("startup", "sum"),
        )  # fmt: skip
        sums = sums.reset_index().merge(per_col, left_on="column", right_index=True)
        sums["count"] = sums["count"] / sums["runs"]
        sums["time_ns"] = sums["time_ns"] / sums["runs"]
        base = _baseline(per_col, baseline)
        base_rows = sums[sums["column"] == base]
        timed = float(base_rows["time_ns"].sum()) > 0
        denom = float(base_rows["time_ns" if timed else "count"].sum())
        numer = sums["time_ns" if timed else "count"]
        sums["share"] = numer / denom if denom > 0 else float("nan")
        its = sums["iterations"].where(sums["iterations"] > 0)
        sums["startup"] = sums["startup"] / sums["runs"]
        sums["per_iteration_raw"] = sums["count"] * sums["runs"] / its
        net = (sums["count"] - sums["startup"]).clip(lower=0)
        sums["per_iteration"] = net * sums["runs"] / its
        sums["probe"] = probe
        # The total row of every column, also of one whose recording failed (zero exits).
        cols = ["count", "time_ns", "share", "per_iteration", "per_iteration_raw", "startup"]
        agg = sums.groupby("column", sort=False)[cols]
        total = per_col.join(agg.sum(min_count=1), how="left")
        total[["count", "time_ns", "startup"]] = total[["count", "time_ns", "startup"]].fillna(0)
        # KVM's counters (--exits without =trace) give no handling time: none, not zero.
        sums.loc[sums["counts_only"].astype(bool), "time_ns"] = float("nan")
        total.loc[total["counts_only"].astype(bool), "time_ns"] = float("nan")
        total = total.rename_axis("column").reset_index()
        total["row"], total["group"], total["probe"] = "total", "", probe
        order = {c: i for i, c in enumerate(per_col.index)}
        rank = {g: i for i, g in enumerate(GROUPS)}
        sums["_g"] = sums["group"].map(rank).fillna(len(rank))
        sums["_c"] = sums["column"].map(order)
        sums = sums.sort_values(["_g", "row", "_c"]).drop(columns=["_g", "_c"])
        total["_c"] = total["column"].map(order)
        total = total.sort_values("_c").drop(columns=["_c"])
        out += [sums, total]
    result = pd.concat(out, ignore_index=True)
    result.attrs["baseline"] = base
    if by == "group":
        result["group"] = result["row"].where(result["row"] != "total", "")
    return result[COLUMNS].reset_index(drop=True)


def _baseline(per_col: pd.DataFrame, selector: str | None) -> str:
    if selector is None:
        return str(per_col.index[0])
    hits = [
        col
        for col, row in per_col.iterrows()
        if matches(str(row["config"]), str(row["recorded_at"]), selector)
    ]
    if not hits:
        raise UsageError(
            f"--baseline {selector} matches no profiled configuration (have: "
            f"{'; '.join(map(str, per_col.index))})"
        )
    return str(hits[0])


def published(name: str) -> pd.DataFrame:
    """A published exit-profile table from vmtax.refs (``virtage_table2``) in the same long
    shape as ``table2``: columns spt and ept, rows the study's factors plus ``total``."""
    table = datasets.load(name)  # strings, exactly as published
    if not {"factor", "group", "spt", "ept"} <= set(table.columns):
        raise UsageError(f"dataset {name} is not an exit-profile table (factor, group, spt, ept)")
    rows = []
    names = {"spt": "SPT (shadow page tables)", "ept": "EPT (extended page tables)"}
    for col, label in names.items():
        table[col] = pd.to_numeric(table[col])
        for factor, group, value in zip(table["factor"], table["group"], table[col], strict=True):
            rows.append({"column": label, "row": factor, "group": group, "share": float(value)})
        rows.append(
            {"column": label, "row": "total", "group": "", "share": float(table[col].sum())}
        )
    return pd.DataFrame(rows)

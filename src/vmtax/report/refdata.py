"""The reference figures drawn from the studies' published numbers (shipped in vmtax.refs).

Two figure kinds have no user data yet (exit profiles need host-side tracing; overcommit
sweeps need a sweep plan), so the report draws them from the studies' own tables, labelled as
such, so that the drawing code exists and is tested today.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

# Study A gives L1 3 vCPUs and L2 2 vCPUs when not over-committed, and every level 4 vCPUs
# when over-committed (seeds.md, study A, "two configurations of each level").
_VCPUS = {
    ("no", "L0"): 4,
    ("no", "L1"): 3,
    ("no", "L2"): 2,
    ("yes", "L0"): 4,
    ("yes", "L1"): 4,
    ("yes", "L2"): 4,
}


def _csv(name: str) -> pd.DataFrame:
    with resources.files("vmtax.refs").joinpath("data", name).open("r") as fh:
        return pd.read_csv(fh)


def virtage_exit_profile() -> pd.DataFrame:
    """Study E, Table 2: exit-handling time by reason group, SPT vs EPT, as config/group/value.

    The table is already normalised to the SPT total; groups are the ``group`` column.
    """
    table = _csv("virtage_table2.csv")
    long = table.melt(
        id_vars=["factor", "group"],
        value_vars=["spt", "ept"],
        var_name="config",
        value_name="value",
    )
    long["config"] = long["config"].map(
        {"spt": "SPT (shadow page tables)", "ept": "EPT (extended page tables)"}
    )
    return long[["config", "group", "factor", "value"]]


def fitzgerald_cpu_scaling() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Study A, Tables 5 and 6: sysbench cpu throughput against the vCPUs the guest had.

    Returns (curves, guide): curves has series, x (vCPUs), y (TPSec), yerr (the published
    standard error), point (the level); guide is the line through L0 proportional to vCPUs.
    """
    table = _csv("fitzgerald2014.csv")
    cpu = table[table["test"] == "cpu"].copy()
    cpu["x"] = [
        _VCPUS[(oc, lvl)] for oc, lvl in zip(cpu["overcommitted"], cpu["level"], strict=True)
    ]
    cpu["series"] = (
        cpu["arch"]
        + ", "
        + cpu["overcommitted"].map({"yes": "over-committed", "no": "not over-committed"})
    )
    curves = cpu.rename(columns={"tpsec": "y", "tpsec_stderr": "yerr", "level": "point"})
    curves = curves[["series", "x", "y", "yerr", "point"]].reset_index(drop=True)
    # Only the not-over-committed rows sweep vCPUs; the over-committed ones sit at x=4.
    sweep = curves[curves["series"].str.endswith(", not over-committed")]
    l0 = sweep[sweep["point"] == "L0"]
    # One segment from the origin per architecture; NaN breaks the line between them.
    xs, ys = [], []
    for y in l0["y"]:
        xs += [0.0, 4.0, float("nan")]
        ys += [0.0, float(y), float("nan")]
    guide = pd.DataFrame({"x": xs, "y": ys})
    return sweep.reset_index(drop=True), guide.reset_index(drop=True)

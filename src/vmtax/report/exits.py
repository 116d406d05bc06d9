"""The report's exit-profile section: study E's stacked bars by reason group per
configuration (normalised to the first configuration's total, drawn by
``figures.exit_reasons``, the same code as the reference figure) and the per-reason table.
Present only when the selected experiments hold exit profiles (``vmtax run --exits``)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import pandas as pd

from vmtax.errors import UsageError
from vmtax.hostprof.table import table2
from vmtax.report import figures
from vmtax.report.exits_format import _count, _num, _time
from vmtax.report.parts import FigureSpec, Table


def section(profiles: pd.DataFrame | None) -> tuple[list[FigureSpec], list[Table]]:
    """Figures and tables of the exit-profile section; empty when there are no profiles."""
    if profiles is None or profiles.empty or profiles["reason"].isna().all():
        return [], []
    figs: list[FigureSpec] = []
    tables: list[Table] = []
    by_group = table2(profiles, by="group")
    by_reason = table2(profiles, by="reason")
    # Shares are of handling time, or of exits where only counts were recorded (--exits).
    for probe in dict.fromkeys(by_group["probe"]):
        counted = (profiles.loc[profiles["probe"] == probe, "recorder"] == "kvm-stats").all()
        what = "exits" if counted else "exit-handling time"
        how = "KVM's own exit counters" if counted else "tracefs histograms"
        groups = by_group[(by_group["probe"] == probe) & (by_group["row"] != "total")]
        bars = groups[["column", "row", "share"]].set_axis(["config", "group", "value"], axis=1)
        base = str(by_group.attrs.get("baseline", ""))
        figs.append(
            FigureSpec(
                key=f"exits-{probe}",
                section="exits",
                title=f"{probe}: {what} by reason group",
                caption="Measured on the hypervisor that runs each configuration (its KVM, "
                f"recorded with {how}); {what} per run, normalised to the total of "
                f"{base or 'the first configuration'}.",
                draw=partial(
                    figures.exit_reasons,
                    bars,
                    title=f"{probe}: {what} by group, normalised",
                ),
            )
        )
        rows = by_reason[by_reason["probe"] == probe]
        cols = list(dict.fromkeys(rows["column"]))
        body = []
        for r in rows.itertuples(index=False):
            body.append(
                [
                    str(r.row), str(r.group or ""), str(r.column),
                    _count(r.count), _time(r.time_ns), _num(r.share), _num(r.per_iteration, 4),
                ]
            )  # fmt: skip
        body.sort(key=lambda ln: (ln[0] == "total", ln[1], ln[0], cols.index(ln[2])))
        incomplete = profiles[(profiles["probe"] == probe) & ~profiles["complete"]]
        lost = (
            f" {incomplete['run_id'].nunique()} runs have incomplete profiles."
            if len(incomplete)
            else ""
        )
        tables.append(
            Table(
                title=f"{probe}: VM exits by reason",
                columns=["reason", "group", "config", "exits/run", "time/run", "share", "/iter"],
                rows=body,
                numeric=[False, False, False, True, True, True, True],
                note=f"Share: of {cols[0]}'s total {'exits' if counted else 'handling time'}; "
                f"/iter: exits per probe iteration (warm-up included).{lost}",
            )
        )
    return figs, tables


def explained(
    runs: pd.DataFrame, profiles: pd.DataFrame | None, tsc_hz: Mapping[int, float]
) -> pd.DataFrame | None:
    """`vmtax explain`'s rows for the selection with its defaults (the highest profiled level
    against the one below, cpuid's round trip); None when the selection cannot have them
    (no profiled level with a baseline below it, no cpuid there)."""
    if profiles is None or profiles.empty or runs.empty:
        return None
    # heavy: the explain use case loads the model and the contract's models, only for
    # selections with exit profiles
    from vmtax.explain import explain
    from vmtax.explain.inputs import select

    try:
        chosen = select(
            runs, profiles, dict(tsc_hz), config=None, baseline=None, probes=[],
            round_trip_probe="cpuid",
        )  # fmt: skip
        return explain(chosen.probes, chosen.source)
    except (UsageError, ValueError):
        return None


def explain_figures(rows: pd.DataFrame | None) -> list[FigureSpec]:
    """One stacked bar per workload: each exit group's share of its overhead and the
    residual (what no counted exit carries); workloads with no detected overhead are left
    out (their shares are undefined)."""
    if rows is None or rows.empty:
        return []
    shown = rows[rows["share"].notna()]
    if shown.empty:
        return []
    bars = pd.DataFrame(
        {
            "config": shown["probe"],
            "group": shown["group"],
            # A residual below zero (the exits explain more than the overhead) cannot be
            # stacked; the bar then ends past 1.
            "value": shown["share"].clip(lower=0.0),
        }
    )
    first = rows.iloc[0]
    return [
        FigureSpec(
            key="explain",
            section="exits",
            title=f"What exits explain of {first['config']}'s overhead over {first['baseline']}",
            caption="Share of each workload's overhead per operation carried by each exit "
            "group (exits per operation × handling time + one round trip, calibrated on "
            f"cpuid: {first['round_trip_ns']:.0f} ns) and the residual no counted exit "
            "carries (vmtax explain). Workloads whose overhead was not detected are left out.",
            draw=partial(
                figures.exit_reasons,
                bars,
                title="overhead by exit group, share of the overhead",
                xlabel="share of the overhead per operation",
                total="{:.2f}",
            ),
        )
    ]

"""`vmtax model`: the nested-cost model, calibrated on a dataset's VM and nested-VM columns or
on measured levels; predicts deeper levels and DVH's what-if (docs/model.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import pandas as pd
import typer

from vmtax.cli import options
from vmtax.cli.output import emit
from vmtax.errors import UsageError
from vmtax.experiment.model import (
    DatasetModel,
    MeasuredModel,
    ModelRequest,
    OutOfSample,
    model,
)
from vmtax.report import compare_format as fmt_mod

if TYPE_CHECKING:
    from vmtax.model import Fit

JSON_KEYS = ("benchmark", "level", "dvh", "predicted", "low", "high", "unit")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("model")(model_cmd)


def model_cmd(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            callback=options.selectors,
            help="Selectors of measured runs (key=value[,key=value]; several = OR).",
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(help="Calibrate on a dataset's VM and nested-VM columns, e.g. dvh2020_micro."),
    ] = None,
    vm_level: Annotated[
        str | None,
        typer.Option(
            callback=options.level(0, 2),
            help="The measured level that plays the VM, L0, L1 or L2: its nested VM is one "
            "level up, at most L3 (default: the lowest level under KVM, else the lowest level).",
        ),
    ] = None,
    probe: Annotated[
        list[str] | None,
        typer.Option(help="Only these probes (cpuid, io, timer, wakeup); repeat for several."),
    ] = None,
    exits_per_exit: Annotated[
        float | None,
        typer.Option(
            callback=options.finite(1, 1e6),
            help="Without an exit profile of the nested cpuid: the exits the VM's hypervisor "
            "sees per nested CPUID (a hand count, e.g. 8.5), each assumed to cost one "
            "null exit; the nested level is then predicted, not only fitted.",
        ),
    ] = None,
    out_of_sample: Annotated[
        bool,
        typer.Option(
            "--out-of-sample",
            help="Predict each probe's nested level from its VM-level runs and exit profile "
            "and a nesting factor fitted on other probes only (cpuid alone, and all others); "
            "with the spin probe at both levels, also with the time-driven term "
            "(docs/model.md).",
        ),
    ] = False,
    statistic: Annotated[
        str,
        typer.Option(
            help="With --out-of-sample: predict the runs' mean or median time per operation "
            "(mean | median); median compares like with like where rare stalls move the "
            "means between boots.",
        ),
    ] = "mean",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Predict the cost of deeper nesting from two levels, with and without DVH.

    The model: C1 = a; C2 = a + m·h; C_d = a + m·H_{d−1}, H_j = h + m_h·H_{j−1} (docs/model.md).

    a: a single-level exit; m: the exits the guest hypervisor causes per forwarded exit; h: each.

    Exit profiles give m and h where recorded; otherwise h is assumed to be one null exit (cpuid).

    Intervals are 95%: the delta method over runs, t at Welch–Satterthwaite's degrees of freedom
    (prediction intervals add one future run). A row is a prediction when no data of its level
    went into it, a decomposition when it explains a measured level by its own exit profile.

    Example: vmtax model --dataset dvh2020_micro

    Example: vmtax model exp=latest --format json

    Example: vmtax model exp=latest --out-of-sample

    Example: vmtax model exp=latest --out-of-sample --statistic median
    """
    if fmt not in fmt_mod.FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(fmt_mod.FORMATS)})")
    request = ModelRequest(
        selectors=tuple(selectors or ()),
        dataset=dataset,
        vm_level=vm_level,
        probes=tuple(probe or ()),
        exits_per_exit=exits_per_exit,
        out_of_sample=out_of_sample,
        statistic=statistic,
        db=db,
    )
    emit(render(model(request), fmt))


def render(result: DatasetModel | MeasuredModel | OutOfSample, fmt: str) -> object:
    """A model's result in one of the formats."""
    if isinstance(result, DatasetModel):
        return render_dataset(result, fmt)
    if isinstance(result, OutOfSample):
        return render_out_of_sample(result, fmt)
    return render_measured(result.fit, result.vm_level, result.notes, fmt)


def _span(row: pd.Series) -> str:
    value = fmt_mod._num(row["predicted"])
    if row["low"] == row["high"] == row["predicted"]:
        return value  # a published point: no spread to show
    return f"{value} [{fmt_mod._num(row['low'])}, {fmt_mod._num(row['high'])}]"


def _records(frame: pd.DataFrame, keys: tuple[str, ...]) -> str:
    out = []
    for rec in frame.to_dict(orient="records"):
        item = {k: fmt_mod.json_safe(rec[k]) for k in keys}
        item["level"], item["dvh"] = int(rec["level"]), bool(rec["dvh"])
        out.append(item)
    return json.dumps(out, indent=2, allow_nan=False) + "\n"


def _notes(params: pd.DataFrame, notes: list[str], fmt: str) -> str:
    lines = [
        f"{r.benchmark} {r.parameter}: {fmt_mod._num(r.estimate)} "
        + (f"[{fmt_mod._num(r.low)}, {fmt_mod._num(r.high)}] " if wide else "")
        + f"{r.unit} ({r.basis})"
        for r, wide in zip(params.itertuples(), params["high"] > params["low"], strict=True)
    ] + notes
    bullet = "- " if fmt == "markdown" else ""
    return "\n" + "\n".join(bullet + line for line in lines) + "\n"


def render_dataset(found: DatasetModel, fmt: str) -> object:
    """The dataset case: predicted L3/L4 (+DVH) and nested+DVH beside the published column."""
    name, result, published = found.name, found.fit, found.published
    preds = result.predictions
    if fmt == "json":
        return _records(preds, JSON_KEYS)
    if fmt == "csv":
        return fmt_mod.render_frame(preds.drop(columns=["measured", "error_pct"]), fmt)
    rows = []
    for bench, group in preds.groupby("benchmark", sort=False):
        at = {(int(r["level"]), bool(r["dvh"])): r for _, r in group.iterrows()}
        dvh2 = at[(2, True)]
        pub = published.get(str(bench))
        row = {"benchmark": bench, "unit": dvh2["unit"]}
        row["L3"], row["L3+DVH"] = _span(at[(3, False)]), _span(at[(3, True)])
        row["nested+DVH from structure (≥)"] = _span(dvh2)
        row["nested+DVH published"] = pub
        row["error %"] = f"{100.0 * (dvh2['predicted'] - pub) / pub:+.1f}" if pub else ""
        rows.append(row)
    table = fmt_mod.render_frame(
        pd.DataFrame(rows),
        fmt,
        f"{name}: calibrated on the VM and nested VM columns; one published figure a cell, so "
        "no interval",
    )
    spread = (
        "L4 is in --format json/csv. nested+DVH from "
        "structure is a lower bound: an exit L0 handles alone is priced as the VM's, and no "
        "term of the VM and nested-VM columns gives a nested exit's extra cost (docs/model.md)"
        + (
            "; L3+DVH and L4+DVH are the published nested+DVH figure: L0 serves the exit at "
            "any depth, the guest hypervisors only configure it before the run."
            if published
            else "; so are L3+DVH and L4+DVH."
        )
    )
    return _joined(table, _notes(result.params, [*result.notes, spread], fmt), fmt)


def render_measured(result: Fit, vm_level: int, notes: list[str], fmt: str) -> object:
    """Predictions beside measurements, in one of the formats."""
    preds = result.predictions
    if fmt == "json":
        return _records(preds, (*JSON_KEYS, "measured", "error_pct"))
    if fmt == "csv":
        return fmt_mod.render_frame(preds, fmt)
    view = preds.assign(
        level=[
            f"L{lv}{'+DVH' if d else ''}"
            for lv, d in zip(preds["level"], preds["dvh"], strict=True)
        ],
        # A level that never finishes an operation has a note instead of a number.
        **{"predicted [95% PI]": preds.apply(lambda r: r.get("note") or _span(r), axis=1)},
        **{"error %": ["" if e is None or e != e else f"{e:+.1f}" for e in preds["error_pct"]]},
        kind=preds["kind"],
    )[["benchmark", "level", "kind", "predicted [95% PI]", "measured", "error %", "unit", "basis"]]
    head = (
        f"calibrated on L{vm_level} (the VM) and L{vm_level + 1} (the nested VM); 95% "
        "intervals. A prediction uses no data from its level; a decomposition explains a "
        "measured level by its own exit profile"
    )
    table = fmt_mod.render_frame(view, fmt, head)
    return _joined(table, _notes(result.params, [*notes, *result.notes], fmt), fmt)


def _joined(table: object, text: str, fmt: str) -> object:
    if isinstance(table, str):
        return table + text

    emit(table)
    return text.lstrip("\n")


def render_out_of_sample(found: OutOfSample, fmt: str) -> object:
    """Each probe's nested level predicted without its own nested runs, beside the measured."""
    preds = found.predictions.assign(statistic=found.statistic)
    vm, e = found.vm_level, found.e
    if fmt == "json":
        keys = ("measured", "error_pct", "weights", "calibrated_on", "statistic")
        return _records(preds, (*JSON_KEYS, *keys, *(["note"] if "note" in preds else [])))
    if fmt == "csv":
        return fmt_mod.render_frame(preds, fmt)
    view = preds.assign(
        level=[f"L{lv}" for lv in preds["level"]],
        # A level that never finishes an operation has a note instead of a number.
        **{"predicted [95% PI]": preds.apply(lambda r: r.get("note") or _span(r), axis=1)},
        **{"error %": ["" if x is None or x != x else f"{x:+.1f}" for x in preds["error_pct"]]},
        kappa=[f"{k:.3g}" for k in preds["kappa"]],
    )[["benchmark", "level", "weights", "calibrated_on", "predicted [95% PI]", "measured",
       "error %", "kappa", "unit"]]  # fmt: skip
    head = (
        f"L{vm + 1} predicted out of sample: each probe's L{vm} runs and exit profile, and a "
        f"nesting factor κ fitted on other probes only (e = {e:.0f} ns); the runs' "
        f"{found.statistic}s; 95% prediction intervals"
    )
    return fmt_mod.render_frame(view, fmt, head)

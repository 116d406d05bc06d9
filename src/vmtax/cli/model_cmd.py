"""`vmtax model`: the nested-cost model, calibrated on a dataset's VM and nested-VM columns or
on measured levels; predicts deeper levels and DVH's what-if (docs/model.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from vmtax.cli import options
from vmtax.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from vmtax.experiment.model import DatasetModel, MeasuredModel, OutOfSample
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

    Beside every prediction: the constant-ratio baseline (the level below times the ratio one
    level down) and, where the level was measured, each one's error; below the table, the
    median absolute error and the worst cell of each, and the accuracy bar for hardware.
    With --out-of-sample, κ per exit group too (docs/model.md).

    Example: vmtax model --dataset dvh2020_micro

    Example: vmtax model exp=latest --format json

    Example: vmtax model exp=latest --out-of-sample

    Example: vmtax model exp=latest --out-of-sample --statistic median
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.experiment.model import ModelRequest, model
    from vmtax.report import compare_format as fmt_mod

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
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.model import DatasetModel, OutOfSample

    if isinstance(result, DatasetModel):
        return render_dataset(result, fmt)
    if isinstance(result, OutOfSample):
        return render_out_of_sample(result, fmt)
    return render_measured(result.fit, result.vm_level, result.notes, fmt, result.score)


def _span(row: pd.Series) -> str:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    value = fmt_mod._num(row["predicted"])
    if row["low"] == row["high"] == row["predicted"]:
        return value  # a published point: no spread to show
    if row["low"] is None or row["low"] != row["low"]:
        return value  # no interval whose coverage is shown (κ per exit group)
    return f"{value} [{fmt_mod._num(row['low'])}, {fmt_mod._num(row['high'])}]"


def _records(frame: pd.DataFrame, keys: tuple[str, ...], params: pd.DataFrame | None = None) -> str:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    out = []
    for rec in frame.to_dict(orient="records"):
        item = {k: fmt_mod.json_safe(rec[k]) for k in keys if k in rec}
        item["level"], item["dvh"] = int(rec["level"]), bool(rec["dvh"])
        if params is not None:
            # The parameters this row was computed from: its class's and the common ones.
            mine = params[params["benchmark"].isin([rec["benchmark"], "all"])]
            item["parameters"] = {
                str(p).split(" ")[0]: fmt_mod.json_safe(v)
                for p, v in zip(mine["parameter"], mine["estimate"], strict=True)
            }
        out.append(item)
    return json.dumps(out, indent=2, allow_nan=False) + "\n"


#: What every scored row carries in --format json beside JSON_KEYS.
SCORED_KEYS = (
    "measured", "error_pct", "log_ratio", "kind", "scope", "basis",
    "baseline", "baseline_error_pct", "baseline_log_ratio", "baseline_basis",
)  # fmt: skip


def _pct(x: object) -> str:
    return "" if x is None or x != x else f"{float(x):+.1f}"  # type: ignore[arg-type]


def _value(x: object) -> str:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    return "" if x is None or x != x else fmt_mod._num(x)


def _scored_view(preds: pd.DataFrame, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per cell: scope, measured, predicted, error, |log ratio|, and the ratio baseline with
    its error, so that the model's gain over it is a number."""
    for col in ("scope", "log_ratio", "baseline", "baseline_error_pct"):
        if col not in preds:
            preds = preds.assign(**{col: None})  # a frame made before these columns
    levels = zip(preds["level"], preds["dvh"], strict=True)
    return preds.assign(
        level=[f"L{lv}{'+DVH' if d else ''}" for lv, d in levels],
        # A level that never finishes an operation has a note instead of a number.
        **{"predicted [95% PI]": preds.apply(lambda r: r.get("note") or _span(r), axis=1)},
        measured=[_value(m) for m in preds["measured"]],
        **{"error %": [_pct(e) for e in preds["error_pct"]]},
        **{"|log ratio|": ["" if x is None or x != x else f"{x:.3f}" for x in preds["log_ratio"]]},
        **{"ratio baseline": [_value(b) for b in preds["baseline"]]},
        **{"baseline error %": [_pct(e) for e in preds["baseline_error_pct"]]},
    )[["benchmark", "level", *extra, "scope", "measured", "predicted [95% PI]", "error %",
       "|log ratio|", "ratio baseline", "baseline error %", "unit"]]  # fmt: skip


def _score_text(score: list[str], fmt: str) -> str:
    bullet = "- " if fmt == "markdown" else ""
    return "".join(f"\n{bullet}{line}" for line in score) + ("\n" if score else "")


def _notes(params: pd.DataFrame, notes: list[str], fmt: str) -> str:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    lines = [
        f"{r.benchmark} {r.parameter}: {fmt_mod._num(r.estimate)} "
        + (f"[{fmt_mod._num(r.low)}, {fmt_mod._num(r.high)}] " if wide else "")
        + f"{r.unit} ({r.basis})"
        for r, wide in zip(params.itertuples(), params["high"] > params["low"], strict=True)
    ] + notes
    bullet = "- " if fmt == "markdown" else ""
    return "\n" + "\n".join(bullet + line for line in lines) + "\n"


def render_dataset(found: DatasetModel, fmt: str) -> object:
    """The dataset case: every predicted cell beside the measured one where the dataset has
    it (the nested level with its class left out, nested+DVH from structure, and any deeper
    level the dataset carries), the ratio baseline beside it, and the score."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    name, result, published = found.name, found.fit, found.published
    preds = result.predictions
    if fmt == "json":
        return _records(preds, (*JSON_KEYS, *SCORED_KEYS), result.params)
    if fmt == "csv":
        return fmt_mod.render_frame(preds, fmt)
    table = fmt_mod.render_frame(
        _scored_view(preds),
        fmt,
        f"{name}: calibrated on the VM and nested VM columns; held out: measured and not "
        "used; extrapolated: a level the dataset does not carry; one published figure a "
        "cell, so no interval",
    )
    spread = (
        "L2 (the nested VM) is predicted from the VM column with its class left out: a_k plus "
        "the mean nesting increment of the other classes (ratio baseline: a_k times their "
        "nested/VM, geometric mean). A deeper level is scored where the dataset carries it "
        "(rows 'L3 VM', 'L3 VM + DVH'); study C measured L3, and a dataset without those "
        "rows leaves L3 extrapolated. "
        "nested+DVH from structure is a lower bound: an exit L0 handles alone is priced as "
        "the VM's, and no term of the VM and nested-VM columns gives a nested exit's extra "
        "cost (docs/model.md)"
        + (
            "; L3+DVH and L4+DVH are the published nested+DVH figure: L0 serves the exit at "
            "any depth, the guest hypervisors only configure it before the run."
            if published
            else "; so are L3+DVH and L4+DVH."
        )
    )
    text = _score_text(found.score, fmt) + _notes(result.params, [*result.notes, spread], fmt)
    return _joined(table, text, fmt)


def render_measured(
    result: Fit, vm_level: int, notes: list[str], fmt: str, score: list[str] | None = None
) -> object:
    """Predictions beside measurements, in one of the formats."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    preds = result.predictions
    if fmt == "json":
        return _records(preds, (*JSON_KEYS, *SCORED_KEYS), result.params)
    if fmt == "csv":
        return fmt_mod.render_frame(preds, fmt)
    view = _scored_view(preds, ("kind",)).assign(basis=preds["basis"])
    head = (
        f"calibrated on L{vm_level} (the VM) and L{vm_level + 1} (the nested VM); 95% "
        "intervals. A prediction uses no data from its level; a decomposition explains a "
        "measured level by its own exit profile"
    )
    table = fmt_mod.render_frame(view, fmt, head)
    text = _score_text(score or [], fmt) + _notes(result.params, [*notes, *result.notes], fmt)
    return _joined(table, text, fmt)


def _joined(table: object, text: str, fmt: str) -> object:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit

    if isinstance(table, str):
        return table + text

    emit(table)
    return text.lstrip("\n")


def render_out_of_sample(found: OutOfSample, fmt: str) -> object:
    """Each probe's nested level predicted without its own nested runs, beside the measured."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    preds = found.predictions.assign(statistic=found.statistic)
    vm, e = found.vm_level, found.e
    if fmt == "json":
        keys = ("weights", "calibrated_on", "statistic", "kappa", *SCORED_KEYS,
                "single_kappa", "single_kappa_error_pct", "interval")  # fmt: skip
        return _records(preds, (*JSON_KEYS, *keys, *(["note"] if "note" in preds else [])))
    if fmt == "csv":
        return fmt_mod.render_frame(preds, fmt)
    view = _scored_view(preds, ("weights", "calibrated_on")).assign(
        kappa=[f"{k:.3g}" for k in preds["kappa"]],
        # The future the interval is for: the next run, or the next boot's mean.
        interval=[
            x if isinstance(x, str) else "" for x in preds.get("interval", [""] * len(preds))
        ],
    )
    if "single_kappa" in preds:
        # Beside a grouped row: the single κ of the same fit, and its error.
        view = view.assign(
            **{"single κ": [_value(x) for x in preds["single_kappa"]]},
            **{"single κ error %": [_pct(x) for x in preds["single_kappa_error_pct"]]},
        )
    round_trip = (
        f"e = {e:.0f} ns"
        if e > 0
        else f"e = {e:.0f} ns is not positive, so an exit adds no round trip"
    )
    head = (
        f"L{vm + 1} predicted out of sample: each probe's L{vm} runs and exit profile, and a "
        f"nesting factor κ fitted on other probes only ({round_trip}); the runs' "
        f"{found.statistic}s; 95% prediction intervals; ratio baseline: the probe's L{vm} "
        "time × the calibration probes' nested/VM ratio (geometric mean)"
    )
    table = fmt_mod.render_frame(view, fmt, head)
    return _joined(table, _score_text(found.score, fmt), fmt)

"""`vmtax compare`: overhead vs a baseline with CIs, adjusted p-values and verdicts; or the
recomputation of a reference dataset (`--dataset`), alone or beside measured configurations."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from vmtax import limits
from vmtax.cli import options
from vmtax.errors import UsageError
from vmtax.gate import rule as gate_rule
from vmtax.stats.compare_options import BOOT_COST_S, CompareOptions

if TYPE_CHECKING:
    import pandas as pd

    from vmtax.stats.compare import Comparison


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("compare")(compare_cmd)


def _where(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise UsageError(
                f"--ref-where: {part.strip()!r} is not key=value "
                "(e.g. arch=x86_64,overcommitted=yes)"
            )
        out[key.strip()] = value.strip()
    return out


def _fail_on(ctx: typer.Context, param: typer.CallbackParam, value: list[str] | None) -> object:
    """--fail-on's words are checked before any store is opened."""
    gate_rule.verdicts(value)
    return value


def _tolerance(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> object:
    gate_rule.check_tolerance(value)
    return value


def compare_cmd(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            callback=options.selectors,
            help="Selectors of the runs to compare (key=value[,key=value]; several = OR).",
        ),
    ] = None,
    baseline: Annotated[
        str | None, typer.Option(help="Selector of the baseline configuration, e.g. level=L0.")
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            callback=options.nonempty,
            help="auto (the iteration mean) | mean | median | p95 | p99 | min | max | throughput | "
            "ops_per_sec | wall_s; repeat for several.",
        ),
    ] = None,
    test: Annotated[str, typer.Option(help="permutation | welch | mannwhitney")] = "permutation",
    adjust: Annotated[
        str, typer.Option(help="holm | bh | none (across the whole command)")
    ] = "holm",
    noise: Annotated[
        float,
        typer.Option(callback=options.fraction, help="Noise band: overheads within 1±noise are ~."),
    ] = 0.02,
    resamples: Annotated[
        int,
        typer.Option(
            callback=options.resamples(100),
            help=f"Permutation resamples, 100..{limits.MAX_RESAMPLES}.",
        ),
    ] = 10_000,
    seed: Annotated[
        int,
        typer.Option(
            callback=options.seed,
            help=f"Seed of the resampling, 0..{limits.MAX_SEED} (results reproduce).",
        ),
    ] = 0,
    boot_cost: options.BootCost = BOOT_COST_S,
    by: options.By = None,
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
    dataset: Annotated[
        str | None,
        typer.Option(
            help="A reference dataset (see vmtax refs list): recompute it, or show it beside the "
            "measured configurations."
        ),
    ] = None,
    ref_where: Annotated[
        str | None,
        typer.Option(
            help="With --dataset and selectors: which reference rows, e.g. "
            "arch=x86_64,overcommitted=yes,test=threads."
        ),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            callback=_fail_on,
            help="Gate: exit 3, after the output, when a row's verdict is slower, faster or any "
            "(either); repeat or give a comma list. Rows that cannot be judged never trip it.",
        ),
    ] = None,
    max_overhead: Annotated[
        float | None,
        typer.Option(
            callback=_tolerance,
            help="Gate: exit 3 when a row's whole 95% CI lies above this overhead ratio "
            "(>= 1, e.g. 1.10); a CI containing it is too wide to tell and does not trip it.",
        ),
    ] = None,
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Compare configurations with a baseline: overhead, 95% CI, study-A columns, verdict.

    Overhead is direction-aware: above 1 means slower, for every metric.

    Columns: runs, boots, between-boot share of the variance, runs per boot (Kalibera and
    Jones), mean, ΔL(n−1), StdErr, StdErr%, overhead with its 95% CI (on the log ratio of run
    means, or of boot means for a level measured in several boots; with one boot a side it
    holds for that boot only), p, adjusted p.

    The verdict is ~ unless the adjusted p < 0.05 AND the whole CI lies outside 1±noise.

    With --dataset alone it recomputes a reference table and flags misprinted figures.

    Example: vmtax compare exp=latest --baseline level=L0 --format markdown

    Example: vmtax compare exp=latest --baseline level=L0 --boot-cost 90 (L2 boots slowly)

    Example: vmtax compare exp=latest --by group --baseline group=bare (an inventory's groups,
    hosts as the unit)

    Example: vmtax compare --dataset fitzgerald2014 --format csv

    Example: vmtax compare exp=latest --baseline level=L0 --fail-on slower --max-overhead 1.10
    (a CI gate: exit 3 when a row is slower, or lies wholly above 1.10; docs/statistics.md)
    """
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.experiment.compare import beside_dataset, measured
    from vmtax.report import compare_format as fmt_mod

    if fmt not in fmt_mod.FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(fmt_mod.FORMATS)})")
    selectors = list(selectors or [])
    rule = gate_rule.Rule(gate_rule.verdicts(fail_on), max_overhead)
    if dataset and not selectors and not baseline:
        if rule.active:
            raise UsageError(
                f"{rule.describe()} judges measured configurations: give selectors and --baseline"
            )
        emit(reference_report(dataset, fmt))
        return
    if not baseline:
        raise UsageError(
            "--baseline is required, e.g. --baseline level=L0 "
            "(or use --dataset NAME alone to recompute a reference table)"
        )
    how = CompareOptions(
        test=test,
        adjust=adjust,
        noise=noise,
        resamples=resamples,
        seed=seed,
        boot_cost_s=boot_cost,
        by=by,
    )
    comp = measured(selectors, baseline, how, metric=metric, db=db)
    if dataset:
        frame = beside_dataset(comp, dataset, _where(ref_where))
        if fmt == "json":
            emit(
                json.dumps(
                    {"comparison": comp.to_json(), "beside": _records(frame)},
                    indent=2,
                    allow_nan=False,
                )
                + "\n"
            )
        elif fmt == "csv":  # one table per CSV stream: the side-by-side one
            emit(fmt_mod.render_frame(frame, fmt))
        else:
            emit(fmt_mod.render_comparison(comp, fmt))
            emit(fmt_mod.render_frame(frame, fmt, f"measured beside {dataset}"))
    else:
        emit(fmt_mod.render_comparison(comp, fmt))
    if rule.active:
        _gate(comp, rule)


def _gate(comp: Comparison, rule: gate_rule.Rule) -> None:
    """The gate's lines on stderr (stdout keeps the comparison whole), then its exit code."""
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.experiment.compare import gated

    sys.stdout.flush()
    outcome = gated(comp, rule)
    for line in outcome.lines():
        typer.echo(line, err=True)
    if outcome.failed:
        # SystemExit, not typer.Exit: the app runs outside click's standalone mode, where an
        # Exit's code comes back as a return value and main() ends with 0.
        raise SystemExit(outcome.exit_code)


def _records(frame: pd.DataFrame) -> list[dict]:
    # heavy: the use case and what it loads, only when the command runs
    from vmtax.report import compare_format as fmt_mod

    return [
        {k: fmt_mod.json_safe(v) for k, v in r.items()} for r in frame.to_dict(orient="records")
    ]


def reference_report(dataset: str, fmt: str) -> object:
    """The recomputed reference table in the requested format."""
    # heavy: pandas and the use case, only when the command runs
    import pandas as pd

    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.experiment.compare import recomputed
    from vmtax.report import compare_format as fmt_mod

    found = recomputed(dataset)
    wide, checked = found.wide, found.checked
    if fmt in ("csv", "json"):
        return fmt_mod.render_frame(wide, fmt)
    flagged = checked[checked["status"] != "ok"]
    view = wide.copy()
    for col in [c for c in view.columns if c.endswith("_recomputed")]:
        view[col] = view[col].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    rendered = fmt_mod.render_frame(view, fmt, f"{dataset}: published vs recomputed")
    lines = [
        f"{len(checked)} derived cells checked; "
        f"{int((checked['status'] == 'misprint').sum())} misprint(s), "
        f"{int((checked['status'] == 'truncated').sum())} truncated instead of rounded"
    ]
    for rec in flagged.to_dict(orient="records"):
        lines.append(
            f"{rec['status']}: table {rec['table']} {rec['test']} {rec['arch']} "
            f"{rec['level']} {rec['column']}: published {rec['published']}, "
            f"recomputed {rec['recomputed']:.4f} "
            f"(inputs allow {rec['low']:.4f}..{rec['high']:.4f})"
        )
    if fmt == "markdown":
        return str(rendered) + "\n" + "\n".join(f"- {x}" for x in lines) + "\n"
    emit(rendered)
    return "\n".join(lines) + "\n"

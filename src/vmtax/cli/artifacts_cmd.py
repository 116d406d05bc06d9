"""`vmtax artifacts SELECTOR [--baseline SEL]`: timing artifacts in the raw samples, with
their evidence (indices, period, p-values)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vmtax import limits
from vmtax.cli import options
from vmtax.errors import UsageError

if TYPE_CHECKING:
    from vmtax.stats.artifacts import Artifacts

COLUMNS = ["config", "probe", "artifact", "found", "evidence"]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("artifacts")(artifacts_cmd)


def _p(p: float | None, adjusted: float | None = None, *, bounded: bool = False) -> str:
    """``p=…`` (with its Holm adjustment); ``p≤…`` where p is a bound (a period decided by
    its tail bound, without shuffles)."""
    if p is None:
        return "p=n/a"
    sign = "≤" if bounded else "="
    text = f"p{sign}{p:.2g}" + (" by its tail bound" if bounded else "")
    if adjusted is not None:
        text += f", Holm-adjusted {'≤' if bounded else ''}{adjusted:.2g}"
    return text


def _list(values: list[Any], limit: int = 12) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def evidence_rows(config: str, probe: str, art: Artifacts) -> list[dict[str, str]]:
    """One row per detector: whether it found something, and the numbers that say so."""
    per, cross, warm, shp, out = art.periodic, art.cross_run, art.warmup, art.shape, art.outliers
    rows = []
    per_p = _p(per.p_value, per.p_adjusted, bounded=per.bounded)
    if per.found:
        text = f"period {per.period} iterations (autocorrelation {per.acf:.2f}, {per_p})"
    else:
        text = f"not detected ({per_p}, spike rate {per.spike_rate:.2%})"
    if per.indices:
        text += f"; slow in every run at iterations {_list(per.indices)}"
    rows.append(("periodic", "yes" if per.found else "no", text))
    if cross.correlation is None:
        text = "too few spikes to compare runs"
    else:
        text = (
            f"spike positions correlate {cross.correlation:.2f} between consecutive runs "
            f"at a drift of {cross.drift} iterations/run ({_p(cross.p_value, cross.p_adjusted)}, "
            f"{cross.pairs} pairs)"
        )
    rows.append(("cross_run", "yes" if cross.found else "no", text))
    slow = "n/a" if warm.slowdown is None else f"{warm.slowdown:.2f}x"
    if warm.p_value is None:
        text = "not tested (it needs 2 runs and 20 iterations)"
    else:
        text = (
            f"first {warm.n_slow} iterations slow; first window/steady {slow} (sign-flip "
            f"test over {warm.runs} runs, {_p(warm.p_value, warm.p_adjusted)}"
            + (f"; it cannot go below {warm.min_p:.2g})" if (warm.min_p or 0) >= 0.01 else ")")
        )
    rows.append(("warmup", "yes" if warm.found else "no", text))
    text = f"mvalue {shp.mvalue:.2f} ({shp.modality})"
    if shp.ad_stat is not None:
        text = (
            f"KS ({_p(shp.p_value, shp.p_adjusted)}), ECDF distance "
            f"{shp.distance:.2f} vs baseline; "
            f"{text}; baseline mvalue {shp.mvalue_baseline:.2f} ({shp.modality_baseline})"
        )
    if shp.small:
        text = f"detected but small (distance under 0.1): {text}"
    found = "changed" if shp.changed else "small" if shp.small else shp.modality
    rows.append(("shape", found, text))
    first = ", ".join(f"run {r} it {i}" for r, i in out.indices[:6])
    rows.append(
        (
            "outliers",
            str(out.count),
            f"{out.fraction:.2%} beyond Tukey fences ({out.high} slow, {out.low} fast; "
            f"kept){'; first: ' + first if first else ''}",
        )
    )
    return [dict(zip(COLUMNS, (config, probe, *r), strict=True)) for r in rows]


def artifacts_cmd(
    selector: Annotated[
        str,
        typer.Argument(
            callback=options.selectors, help="Selector of the runs, e.g. exp=3,level=L1."
        ),
    ],
    baseline: Annotated[
        str | None, typer.Option(help="Selector of the baseline for the shape test, e.g. level=L0.")
    ] = None,
    resamples: Annotated[
        int,
        typer.Option(
            callback=options.resamples(19),
            help="Least permutations per test; raised to what the command's family of tests "
            "needs (Holm, family-wise 1% across all of them).",
        ),
    ] = 199,
    seed: Annotated[
        int,
        typer.Option(
            callback=options.seed, help=f"Seed of the permutations, 0..{limits.MAX_SEED}."
        ),
    ] = 0,
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | json")] = "table",
    db: Annotated[
        str | None, typer.Option(help="Store URL; default $VMTAX_DB or the user data dir.")
    ] = None,
) -> None:
    """Find timing artifacts in raw samples, with their evidence.

    Detectors: periodic spikes, cross-run memory, warm-up, shape vs baseline, Tukey outliers.

    Runs of one configuration and probe form a runs x iterations matrix; nothing is dropped.

    Example: vmtax artifacts exp=latest,probe=write --baseline level=L0
    """
    # heavy: pandas and the use case, only when the command runs
    import pandas as pd

    # heavy: the use case and what it loads, only when the command runs
    from vmtax.cli.output import emit
    from vmtax.experiment.artifacts import find_artifacts
    from vmtax.report import compare_format as fmt_mod

    if fmt not in fmt_mod.FORMATS:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(fmt_mod.FORMATS)})")
    found = find_artifacts(selector, baseline=baseline, resamples=resamples, seed=seed, db=db)
    results, tests = found.results, found.tests
    if fmt == "json":
        emit(
            json.dumps(
                [{"config": c, "probe": p, **a.to_dict()} for c, p, a in results],
                indent=2,
                allow_nan=False,
            )
            + "\n"
        )
        return
    frame = pd.DataFrame(
        [r for c, p, a in results for r in evidence_rows(c, p, a)], columns=COLUMNS
    )
    title = f"timing artifacts in {selector} (Holm-adjusted over {tests} tests, family-wise 1%)"
    emit(fmt_mod.render_frame(frame, fmt, title))

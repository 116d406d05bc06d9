"""The report's "predicted vs measured" table: the nested-cost model (vmtax.model) calibrated
on the selected runs, beside the levels that were measured. Absent when the runs do not hold
two levels of an exit-heavy probe (cpuid, io, timer, wakeup)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vmtax.errors import UsageError
from vmtax.model import fit
from vmtax.model.score import summarise
from vmtax.model.sources import from_runs
from vmtax.report.compare_format import _num
from vmtax.report.parts import Table

if TYPE_CHECKING:
    import pandas as pd

    from vmtax.report.inputs import ReportInput


def table(data: ReportInput) -> Table | None:
    """Predicted vs measured per probe and level, or None when the model does not apply."""
    runs = data.runs
    if runs.empty or "mean" not in runs:
        return None
    try:
        found = from_runs(
            runs,
            profiles=data.exit_profiles,
            tsc_hz=_tsc_hz(data.configurations),
        )
        result = fit(found.series, offset=found.vm_level - 1)
    except UsageError:
        return None
    rows = []
    p = result.predictions
    for benchmark, level, dvh, kind, predicted, low, high, measured_v, error_pct, unit in zip(
        p["benchmark"], p["level"], p["dvh"], p["kind"], p["predicted"], p["low"], p["high"],
        p["measured"], p["error_pct"], p["unit"], strict=True,
    ):  # fmt: skip
        measured = "" if measured_v is None or measured_v != measured_v else _num(measured_v)
        error = "" if error_pct is None or error_pct != error_pct else f"{error_pct:+.1f}"
        rows.append(
            [
                str(benchmark),
                f"L{level}{'+DVH' if dvh else ''}",
                str(kind),
                _num(predicted),
                f"{_num(low)} – {_num(high)}",
                measured,
                error,
                str(unit),
            ]
        )
    # The constant-ratio baseline beside every prediction, scored where the truth is known.
    for row, base, base_error, scope in zip(
        rows, p["baseline"], p["baseline_error_pct"], p["scope"], strict=True
    ):
        row[3:3] = [str(scope)]
        row[-1:-1] = [
            "" if base is None or base != base else _num(base),
            "" if base_error is None or base_error != base_error else f"{base_error:+.1f}",
        ]
    score = " ".join(s.line() + "." for s in summarise(p))
    return Table(
        title=(
            f"Predicted (and decomposed) vs measured: calibrated on L{found.vm_level} (the VM) "
            f"and L{found.vm_level + 1} (the nested VM)"
        ),
        columns=[
            "probe",
            "level",
            "kind",
            "scope",
            "model",
            "95% interval",
            "measured",
            "error %",
            "ratio baseline",
            "baseline error %",
            "unit",
        ],
        rows=rows,
        numeric=[False, False, False, False, True, True, True, True, True, True, False],
        note="The nested-cost model (docs/model.md): C_d = a + D·(1 + m_h + … + m_h^(d−2)); "
        "+DVH: L0 handles the class directly. A prediction uses no data from its level; a "
        "decomposition explains a measured level by its own exit profile. Ratio baseline: "
        "the level below times the null exit's ratio one level down (docs/model.md, The "
        "baseline). "
        + score
        + " On this testbed (a TCG L1) a prediction that repeats across boots is what can be "
        "shown; accuracy on hardware cannot (docs/model.md, What the testbed can show). "
        + " ".join(result.notes)
        + " "
        + " ".join(
            f"m_h {basis}."
            for parameter, basis in zip(
                result.params["parameter"], result.params["basis"], strict=True
            )
            if parameter.startswith("m_h")
        ),
    )


def _tsc_hz(configurations: pd.DataFrame | None) -> dict[int, float]:
    out: dict[int, float] = {}
    if configurations is None or "fingerprint" not in getattr(configurations, "columns", ()):
        return out
    for cid, fp in zip(
        configurations["configuration_id"], configurations["fingerprint"], strict=True
    ):
        hz = ((fp or {}).get("cpu") or {}).get("tsc_hz") if isinstance(fp, dict) else None
        if hz:
            out[int(cid)] = float(hz)
    return out

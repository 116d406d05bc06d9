"""Plain-language sentences from the statistics' results (formatting only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from vmtax.report.compare_format import fmt_ratio
from vmtax.stats.boots import ONE_BOOT

ALPHA = 0.05

# The words of `vmtax compare`'s verdict column, so the report and compare say the same.
_VERDICTS = {
    "slower": "slower than the baseline",
    "faster": "faster than the baseline",
    "~": "a difference beyond noise not detected",
    "imprecise": "imprecise: adaptive sampling did not reach its precision target",
    "baseline": "baseline",
}


_SHORT = {"slower": "slower", "faster": "faster", "~": "~", "baseline": "baseline"}


def short_verdict(code: str) -> str:
    """The verdict in one word or two, for table cells."""
    return _SHORT.get(code, code)


def verdict(code: str) -> str:
    """The verdict code of vmtax.stats.compare in words."""
    return _VERDICTS.get(code, code)


def _ci(low: float, high: float) -> str:
    return f"95% CI {fmt_ratio(low)}–{fmt_ratio(high)}×"


def summary(rows: pd.DataFrame) -> list[str]:
    """One sentence per non-baseline configuration: its headline overhead.

    The headline is the geometric mean over probes when several probes were compared, else
    the single probe's overhead.
    """
    lines = []
    probes = [p for p in dict.fromkeys(rows["probe"]) if p != "geomean"]
    for config in dict.fromkeys(rows["config"]):
        sub = rows[(rows["config"] == config) & ~rows["is_baseline"].astype(bool)]
        if sub.empty:
            continue
        geo = sub[sub["probe"] == "geomean"]
        head = (
            geo.iloc[0] if len(probes) > 1 and len(geo) else sub[sub["probe"] != "geomean"].iloc[0]
        )
        what = (
            f"geometric mean over {len(probes)} probes"
            if head["probe"] == "geomean"
            else f"on {head['probe']}"
        )
        ratio = float(head["overhead"])
        lines.append(
            f"{config}: {fmt_ratio(ratio)}× the baseline's cost ({what}, "
            f"{_ci(float(head['ci_low']), float(head['ci_high']))}): "
            f"{verdict(str(head['verdict']))}."
            + (
                " One boot a side: this holds for these boots only."
                if sub["warnings"].astype(str).str.contains(ONE_BOOT, regex=False).any()
                else ""
            )
        )
    return lines


@dataclass
class Finding:
    """The timing artifacts found for one probe and configuration, with their evidence."""

    probe: str
    config: str
    shape: tuple[int, int]
    found: list[str] = field(default_factory=list)
    clear: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


def _num(value: Any, spec: str = ".3g") -> str:  # noqa: ANN401
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "n/a"
    return format(v, spec) if v == v else "n/a"


def _pq(part: Any) -> str:  # noqa: ANN401
    """``p = …`` and, once the command's family is adjusted, ``Holm-adjusted …``; ``p ≤ …``
    where p is a bound (a period decided by its tail bound, without shuffles)."""
    adjusted = getattr(part, "p_adjusted", None)
    bounded = bool(getattr(part, "bounded", False))
    text = f"p {'≤' if bounded else '='} {_num(part.p_value)}"
    if bounded:
        text += " by its tail bound"
    if adjusted is not None and adjusted != part.p_value:
        text += f", Holm-adjusted {'≤ ' if bounded else ''}{_num(adjusted)}"
    return text


def finding(probe: str, config: str, result: Any) -> Finding:  # noqa: ANN401
    """One sentence per detector of ``vmtax.stats.artifacts.detect``: found or clear.

    Whether something was found is the detector's own decision (its ``found``/``changed``
    flags); this function only words it.
    """
    out = Finding(
        probe=probe,
        config=config,
        shape=(int(result.runs), int(result.iterations)),
        evidence=result.to_dict(),
    )
    per = result.periodic
    if per.found:
        shown = ", ".join(str(i) for i in per.indices[:12])
        more = f" and {len(per.indices) - 12} more" if len(per.indices) > 12 else ""
        where = f"; slow in nearly every run at indices {shown}{more}" if per.indices else ""
        out.found.append(
            f"Periodic spikes every {per.period} iterations (autocorrelation "
            f"{_num(per.acf)}, {_pq(per)}){where}."
        )
    elif per.p_value is None:
        out.clear.append("Periodic spikes: not detected (no recurring lag to test).")
    else:
        out.clear.append(f"Periodic spikes: not detected ({_pq(per)}).")

    cross = result.cross_run
    if cross.found:
        how = (
            "at the same indices in consecutive runs"
            if not cross.drift
            else f"moving by {cross.drift} iterations from one run to the next"
        )
        out.found.append(
            f"Runs remember each other: spikes recur {how} (correlation "
            f"{_num(cross.correlation)}, {_pq(cross)}, "
            f"{cross.pairs} run pairs)."
        )
    else:
        out.clear.append(f"Memory between runs: not detected ({_pq(cross)}).")

    warm = result.warmup
    runs = getattr(warm, "runs", 0)
    if warm.found:
        out.found.append(
            f"Warm-up not over: the first {warm.n_slow} iterations of a run are "
            f"{_num(warm.slowdown)}× the steady state (sign-flip test over {runs} runs, "
            f"{_pq(warm)})."
        )
    elif warm.p_value is None:
        out.clear.append("Leftover warm-up: not tested (it needs 2 runs and 20 iterations).")
    elif getattr(warm, "min_p", None) is not None and warm.min_p >= 0.01:
        out.clear.append(
            f"Leftover warm-up: not detected ({_pq(warm)}); with {runs} runs the sign-flip "
            f"test over runs cannot give a p below {_num(warm.min_p)}."
        )
    else:
        out.clear.append(f"Leftover warm-up: not detected ({_pq(warm)}).")

    shp = result.shape
    if shp.changed:
        out.found.append(
            f"The distribution's shape differs from the baseline's "
            f"(KS distance {_num(shp.distance)}, {_pq(shp)})."
        )
    elif getattr(shp, "small", False):
        out.clear.append(
            f"A change of distribution shape: detected but small (KS distance "
            f"{_num(shp.distance)}, under 0.1; {_pq(shp)}), so not counted as a change."
        )
    elif shp.p_value is not None:
        out.clear.append(f"A change of distribution shape: not detected ({_pq(shp)}).")
    if shp.modality == "bimodal":
        out.found.append(
            f"Bimodal distribution (mvalue {_num(shp.mvalue)}; about 2 for one mode, 4 for two)."
        )
    else:
        out.clear.append(f"Bimodality: not detected (mvalue {_num(shp.mvalue)}, under 3.2).")

    outl = result.outliers
    if outl.count:
        out.clear.append(
            f"{outl.count:,} Tukey outliers ({outl.fraction:.2%}: {outl.high:,} "
            f"slow, {outl.low:,} fast); counted, never dropped."
        )
    return out

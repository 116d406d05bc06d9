"""Scoring predictions where the truth is known: per cell the error and |log ratio|, per rule
(the model, the constant-ratio baseline, the single κ) the median absolute error and the worst
cell, and the accuracy bar for hardware (docs/model.md, "What the testbed can show").

A cell is scored only when it is held out: measured, and none of its level's data went into
its prediction. A fitted row (a decomposition) and an extrapolated one (a level never
measured) are left out of every summary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.model.nested import HELD_OUT

#: The rules a frame may carry: (name, column of the value, column of its error in %).
RULES = (
    ("model", "predicted", "error_pct"),
    ("single κ", "single_kappa", "single_kappa_error_pct"),
    ("ratio baseline", "baseline", "baseline_error_pct"),
)


@dataclass(frozen=True)
class Summary:
    """One rule's score over the held-out cells it predicted."""

    rule: str
    cells: int
    median_abs_error_pct: float
    median_abs_log_ratio: float
    worst: str
    worst_error_pct: float

    def line(self) -> str:
        """One line: the median absolute error, the median |log ratio| and the worst cell."""
        return (
            f"{self.rule}: median |error| {self.median_abs_error_pct:.1f}% over {self.cells} "
            f"held-out cell(s), median |log ratio| {self.median_abs_log_ratio:.3f}; worst "
            f"{self.worst} {self.worst_error_pct:+.1f}%"
        )


def cell_label(row: pd.Series) -> str:
    """``Hypercall L3+DVH``, with the calibration where a frame has one."""
    label = f"{row['benchmark']} L{int(row['level'])}{'+DVH' if bool(row['dvh']) else ''}"
    cal = row.get("calibrated_on")
    if isinstance(cal, str) and cal:
        label += f" (on {cal})"
    return label


def held_out(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a measured value that none of their level's data went into."""
    if frame.empty or "measured" not in frame:
        return frame.iloc[0:0]
    measured = pd.to_numeric(frame["measured"], errors="coerce")
    keep = measured.notna() & (measured > 0)
    if "scope" in frame:
        keep &= frame["scope"] == HELD_OUT
    if "kind" in frame:
        keep &= frame["kind"] != "decomposition"
    return frame[keep]


def summarise(frame: pd.DataFrame, *, common: bool = False) -> list[Summary]:
    """Each rule the frame carries, scored over its held-out cells (a rule with no scored
    cell is left out); ``common``: only over the cells every rule present predicted, so the
    rules are compared on the same cells."""
    cells = held_out(frame)
    if common:
        for _, _value_col, error_col in RULES:
            if error_col not in cells:
                continue
            has = pd.to_numeric(cells[error_col], errors="coerce").notna()
            if has.any():
                cells = cells[has]
    out = []
    for rule, value_col, error_col in RULES:
        if value_col not in cells or error_col not in cells:
            continue
        errors = pd.to_numeric(cells[error_col], errors="coerce")
        values = pd.to_numeric(cells[value_col], errors="coerce")
        measured = pd.to_numeric(cells["measured"], errors="coerce")
        ok = errors.notna() & values.notna() & (values > 0)
        if not ok.any():
            continue
        logs = (values[ok] / measured[ok]).map(lambda x: abs(float(np.log(x))))
        worst_at = errors[ok].abs().idxmax()
        out.append(
            Summary(
                rule,
                int(ok.sum()),
                float(errors[ok].abs().median()),
                float(logs.median()),
                cell_label(cells.loc[worst_at]),  # type: ignore[call-overload]
                float(errors[worst_at]),  # type: ignore[call-overload]
            )
        )
    return out


@dataclass(frozen=True)
class Bar:
    """One line of the accuracy bar for hardware: met, not met, or not measured."""

    name: str
    verdict: str
    detail: str

    def line(self) -> str:
        return f"{self.name}: {self.verdict}" + (f" ({self.detail})" if self.detail else "")


def bars(frame: pd.DataFrame, nested_level: int) -> list[Bar]:
    """The model's held-out cells against the bar a reviewer would accept on hardware:
    L3 from L1 + L2 (one level above the nested level) at least 3 of 4 within ±20% and all
    within ±30%; the nested level from the VM level with the class left out (``leave one
    out`` rows, or out-of-sample rows calibrated on the other probes) all within ±15%; L3 + DVH
    given L2 + DVH (the DVH classes with a nested + DVH level) all within ±10%."""
    cells = held_out(frame)
    err = pd.to_numeric(cells["error_pct"], errors="coerce").abs() if len(cells) else None
    if err is None:
        return [Bar(name, "not measured", "") for name in BAR_NAMES]
    basis = cells["basis"].astype(str) if "basis" in cells else pd.Series("", index=cells.index)
    cal = cells["calibrated_on"].astype(str) if "calibrated_on" in cells else None
    dvh = cells["dvh"].astype(bool)
    deeper = cells["level"] == nested_level + 1
    left_out = basis.str.startswith("leave one out")
    if cal is not None:
        left_out |= (cells["level"] == nested_level) & cal.str.contains(",")
    served = basis.str.startswith("DVH (served by L0")

    def judge(name: str, mask: pd.Series, limit: float, share: float) -> Bar:
        e = err[mask].dropna()
        if e.empty:
            return Bar(name, "not measured", "")
        inner = int((e <= limit).sum())
        ok = inner >= int(np.ceil(share * len(e)))
        if share < 1:
            ok = ok and bool((e <= 30.0).all())
        detail = f"{inner} of {len(e)} within ±{limit:.0f}%, worst {e.max():.1f}%"
        return Bar(name, "met" if ok else "not met", detail)

    return [
        judge(BAR_NAMES[0], ~dvh & deeper, 20.0, 0.75),
        judge(BAR_NAMES[1], ~dvh & left_out, 15.0, 1.0),
        judge(BAR_NAMES[2], dvh & deeper & served, 10.0, 1.0),
    ]


BAR_NAMES = (
    "L3 from L1 + L2 (at least 3 of 4 within ±20%, all within ±30%)",
    "the nested level from the VM level, leave one out (all within ±15%)",
    "L3+DVH given L2+DVH (all within ±10%)",
)

"""A comparison's rows judged against a gate :class:`~vmtax.gate.rule.Rule`.

Rows are plain mappings with the columns of ``stats.compare.COLUMNS`` (``probe``, ``metric``,
``config``, ``is_baseline``, ``overhead``, ``ci_low``, ``ci_high``, ``verdict``,
``warnings``), so the gate needs neither pandas nor a store. Every row but the baseline's is
judged, the geomean rows included (their verdict stands on their interval and the noise band).

- A row whose verdict says no verdict is possible (``one boot``: a guest measured in one
  boot, whose interval is the difference within that boot only) is judged by neither rule,
  nor is the geomean row of its configuration, which rests on the same boot.
- ``--fail-on``: a row trips when its verdict is one the rule names. A row whose verdict
  cannot say "different" or "not detected" is not judged: ``imprecise`` (adaptive sampling
  missed its precision target), a row whose best possible adjusted p cannot reach
  significance, and a row without an interval.
- ``--max-overhead R``: a row trips when its whole 95% interval lies above ``R``. A row whose
  interval contains ``R`` is too wide to tell and is not judged; one wholly at or below ``R``
  passes. Each interval is a 95% interval of its own row, not adjusted across rows.

A row not judged never trips the gate; the outcome names it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vmtax.gate.rule import EXIT_TRIPPED, Rule

#: How stats.compare words the warning of a row that can never reach significance.
_NO_SIGNIFICANCE = "cannot reach significance"
#: The verdicts of a row that was tested; any other word (``one boot``: a guest measured in
#: one boot, whose interval is the difference within that boot) says no verdict is possible.
_TESTED = frozenset({"slower", "faster", "~", "imprecise"})


@dataclass(frozen=True)
class Finding:
    """One row and why it tripped the gate, or why it could not be judged."""

    row: str
    reason: str

    def __str__(self) -> str:
        return f"{self.row} ({self.reason})"


@dataclass(frozen=True)
class Outcome:
    """The gate's judgement of one comparison."""

    rule: Rule
    rows: int
    tripped: tuple[Finding, ...]
    unjudged: tuple[Finding, ...]

    @property
    def failed(self) -> bool:
        return bool(self.tripped)

    @property
    def exit_code(self) -> int:
        return EXIT_TRIPPED if self.failed else 0

    def lines(self) -> list[str]:
        """What the command says after its output: the rows not judged, then the result."""
        out = []
        if self.unjudged:
            out.append(
                f"gate: {len(self.unjudged)} of {self.rows} rows could not be judged and do not "
                f"count: {'; '.join(map(str, self.unjudged))}"
            )
        judged = self.rows - len(self.unjudged)
        if self.tripped:
            out.append(
                f"gate: failed (exit {EXIT_TRIPPED}): {len(self.tripped)} of {judged} rows "
                f"judged trip {self.rule.describe()}: {'; '.join(map(str, self.tripped))}"
            )
        else:
            out.append(
                f"gate: passed: {self.rule.describe()} not tripped ({judged} of {self.rows} "
                "rows judged)"
            )
        return out


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _ci(row: Mapping[str, Any]) -> str:
    return f"{float(row['overhead']):.3f} [{float(row['ci_low']):.3f}, {float(row['ci_high']):.3f}]"


def _name(row: Mapping[str, Any]) -> str:
    return f"{row['probe']} {row['metric']} {row['config']}"


def _by_verdict(row: Mapping[str, Any], rule: Rule) -> tuple[str | None, str | None]:
    """(why it trips, why it cannot be judged) for --fail-on; both None when it passes."""
    if not rule.fail_on:
        return None, None
    verdict = str(row.get("verdict") or "")
    has_ci = _finite(row.get("ci_low")) and _finite(row.get("ci_high"))
    if verdict in rule.fail_on:
        return f"{verdict}, overhead {_ci(row)}", None
    if verdict == "imprecise":
        return None, "imprecise: adaptive sampling missed its precision target"
    if _NO_SIGNIFICANCE in str(row.get("warnings") or ""):
        return None, "too few runs or boots for any verdict"
    if not has_ci:
        return None, "no interval"
    return None, None


def _by_tolerance(row: Mapping[str, Any], rule: Rule) -> tuple[str | None, str | None]:
    """(why it trips, why it cannot be judged) for --max-overhead."""
    tol = rule.max_overhead
    if tol is None:
        return None, None
    if not (_finite(row.get("ci_low")) and _finite(row.get("ci_high"))):
        return None, "no interval"
    low, high = float(row["ci_low"]), float(row["ci_high"])
    if low > tol:
        return f"overhead {_ci(row)} lies above {tol:g}", None
    if high > tol:
        return None, f"overhead {_ci(row)} contains {tol:g}: too wide to tell"
    return None, None


def judge(rows: Iterable[Mapping[str, Any]], rule: Rule) -> Outcome:
    """Judge every non-baseline row: a row trips when either part of the rule trips on it,
    and is not judged when neither trips and either could not judge it."""
    tripped: list[Finding] = []
    unjudged: list[Finding] = []
    rows = [row for row in rows if not bool(row.get("is_baseline"))]
    # A geomean row summarises its configuration's probes: when one of them can give no
    # verdict (one boot), the summary rests on the same boot and is not judged either.
    spoilt = {
        (row.get("metric"), row.get("config"))
        for row in rows
        if row.get("probe") != "geomean" and str(row.get("verdict") or "") not in _TESTED
    }
    for row in rows:
        verdict = str(row.get("verdict") or "")
        if verdict not in _TESTED:
            unjudged.append(Finding(_name(row), f"{verdict or 'no verdict'}: no verdict possible"))
            continue
        if row.get("probe") == "geomean" and (row.get("metric"), row.get("config")) in spoilt:
            unjudged.append(Finding(_name(row), "summarises rows with no verdict possible"))
            continue
        verdict_trip, verdict_unsure = _by_verdict(row, rule)
        tol_trip, tol_unsure = _by_tolerance(row, rule)
        trips = [r for r in (verdict_trip, tol_trip) if r]
        unsure = [r for r in (verdict_unsure, tol_unsure) if r]
        if trips:
            tripped.append(Finding(_name(row), "; ".join(trips)))
        elif unsure:
            unjudged.append(Finding(_name(row), "; ".join(dict.fromkeys(unsure))))
    return Outcome(rule, len(rows), tuple(tripped), tuple(unjudged))

"""The limits every command shares: one bound per kind of value, one wording when it is broken.

A value outside these is refused at the door (UsageError: one line, exit 2) by whichever
command receives it, the CLI's options (``vmtax.cli.options``) and the selector language
alike, so nothing is accepted that breaks later (SQLite's integers overflow past 2^63-1, a
NaN objective compares false with everything, a budget of 10^12 s never ends).
"""

from __future__ import annotations

import math

from vmtax.errors import UsageError

#: Experiment and run ids are SQLite's (and PostgreSQL's bigint) signed 64-bit integers.
MAX_ID = 2**63 - 1
#: Every seed is stored in a signed 64-bit column; run and sweep accepted this range first.
MAX_SEED = 2**63 - 1
#: The agent's own bound on --duration (probe/src/run.rs).
MAX_DURATION_S = 86_400.0
#: A per-run timeout, or a whole command's sampling budget, longer than a week is a typo.
MAX_TIMEOUT_S = 7 * 86_400.0
MAX_BUDGET_S = MAX_TIMEOUT_S
#: Runs per probe: even 10 ms runs would keep the machine busy for over a day past this.
MAX_RUNS = 10_000
#: Resamples of a permutation test or bootstrap: 10^6 puts p's Monte Carlo error near 10^-4
#: at p = 0.01; past it a command only runs longer.
MAX_RESAMPLES = 1_000_000


def check_int(value: int | None, what: str, low: int, high: int) -> None:
    """``low <= value <= high``; None (not given) passes."""
    if value is not None and not low <= value <= high:
        raise UsageError(f"{what} must be in {low}..{high}, got {short(value)}")


def check_id(value: int | None, what: str) -> None:
    check_int(value, what, 1, MAX_ID)


def check_seed(value: int | None, what: str = "--seed") -> None:
    check_int(value, what, 0, MAX_SEED)


def check_seconds(value: float | None, what: str, bound: float) -> None:
    """A positive, finite number of seconds at most ``bound``."""
    if value is not None and not (math.isfinite(value) and 0 < value <= bound):
        raise UsageError(f"{what} must be a number of seconds in (0, {bound:g}], got {value:g}")


def check_finite(value: float | None, what: str, low: float, high: float) -> None:
    """A finite number in ``[low, high]``: NaN and the infinities never pass."""
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{what} must be a number in [{low:g}, {high:g}], got {value:g}")


def id_text(text: str, what: str) -> int:
    """An id typed as digits, in 1..MAX_ID (the caller has checked it is all digits)."""
    number = int(text)
    check_id(number, what)
    return number


def short(n: int) -> str:
    """An integer as typed, cut to its first digits when it is absurdly long."""
    text = str(n)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


#: A duration's units, as `--budget 2m` or a suite's `budget = "90s"` give them.
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_seconds(value: object) -> float:
    """``"60s"``, ``"2m"``, ``"1.5h"``, ``"500ms"`` or a number of seconds -> seconds (> 0)."""
    text = str(value).strip().lower()
    unit = next((u for u in sorted(_SECONDS, key=len, reverse=True) if text.endswith(u)), "")
    try:
        seconds = float(text.removesuffix(unit) if unit else text) * _SECONDS.get(unit, 1.0)
    except ValueError:
        raise ValueError(f"must be a duration like 60s, 2m or 1h, got {text!r}") from None
    if not (seconds > 0 and seconds < float("inf")):
        raise ValueError(f"must be a positive duration, got {text!r}")
    return seconds

"""The sizes a run may ask for, checked by the controller before anything starts.

The agent refuses the same values at run time, but by then an experiment exists and a
guest may have booted; here a bad value costs one line and exit 2. Each bound is stated in
``vmtax run --help`` and in the suite's validation message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from vmtax.contract import ProbeInfo
from vmtax.errors import UsageError

#: The agent's own bound on --duration (probe/src/run.rs).
MAX_DURATION_S = 86_400.0
#: A per-run timeout longer than a week is a typo, never a plan.
MAX_TIMEOUT_S = 7 * 86_400.0
#: Runs per probe: even 10 ms runs would keep the machine busy for over a day past this.
MAX_RUNS = 10_000
#: Iterations and warm-up are u64 in the agent; stored in SQLite's signed 64-bit integers.
MAX_COUNT = 2**63 - 1
#: The run-order seed is stored in a signed 64-bit column.
MAX_SEED = 2**63 - 1

# The agent ends a numeric parameter's help with its range: "... (1..1000000)".
_RANGE = re.compile(r"\((-?[0-9.eE+]+)\.\.(-?[0-9.eE+]+)\)\s*$")


def check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..{MAX_SEED}, got {_short(seed)}")


def check_runs(runs: int | None, what: str = "--runs") -> None:
    if runs is not None and not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"{what} must be in 1..{MAX_RUNS}, got {_short(runs)}")


def check_seconds(value: float | None, what: str, bound: float) -> None:
    """A positive, finite number of seconds at most ``bound``."""
    if value is None:
        return
    if not (math.isfinite(value) and 0 < value <= bound):
        raise UsageError(f"{what} must be a number of seconds in (0, {bound:g}], got {value:g}")


def check_params(plan_entries: dict[str, dict[str, Any]], available: Iterable[ProbeInfo]) -> None:
    """Every numeric parameter lies in the range the agent states for it (finite, in range)."""
    infos = {p.name: p for p in available}
    for name, entry in plan_entries.items():
        info = infos.get(entry["probe"])
        if info is None:
            continue
        specs = {p.name: p for p in info.params}
        for key, value in entry["params"].items():
            spec = specs.get(key)
            if spec is None or spec.kind not in {"int", "float"}:
                continue
            _check_number(name, key, value, spec.kind, spec.help)


def _check_number(entry: str, key: str, value: object, kind: str, help_text: str) -> None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{entry}: parameter {key}={value!r} must be a number") from None
    if kind == "int" and not (math.isfinite(number) and number == int(number)):
        raise UsageError(f"{entry}: parameter {key}={value!r} must be an integer")
    found = _RANGE.search(help_text)
    low, high = (float(found.group(1)), float(found.group(2))) if found else (-math.inf, math.inf)
    if not (math.isfinite(number) and low <= number <= high):
        span = f"{found.group(1)}..{found.group(2)}" if found else "a finite number"
        raise UsageError(f"{entry}: parameter {key}={value!r} must be in {span}")


def _short(n: int) -> str:
    text = str(n)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"

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
from vmtax.limits import (  # the shared limits, re-exported for the suite's fields
    MAX_DURATION_S,
    MAX_RUNS,
    MAX_SEED,
    MAX_TIMEOUT_S,
    check_int,
    check_seconds,
    check_seed,
)

__all__ = [
    "MAX_COUNT", "MAX_DURATION_S", "MAX_RUNS", "MAX_SEED", "MAX_TIMEOUT_S",
    "check_params", "check_runs", "check_seconds", "check_seed",
]  # fmt: skip

#: Iterations and warm-up are u64 in the agent; stored in SQLite's signed 64-bit integers.
MAX_COUNT = 2**63 - 1

# The agent ends a numeric parameter's help with its range: "... (1..1000000)".
_RANGE = re.compile(r"\((-?[0-9.eE+]+)\.\.(-?[0-9.eE+]+)\)\s*$")


def check_runs(runs: int | None, what: str = "--runs") -> None:
    check_int(runs, what, 1, MAX_RUNS)


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

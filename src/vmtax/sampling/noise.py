"""The machine's interference, sampled on a target by the agent's ``noise`` command: the
core clock (a dependent-add chain timed with the TSC), steal, other CPU use and runnable
tasks over a short window. Adaptive sampling stores one sample before and one after the runs
of every look, so a probe that stayed imprecise can be put beside what the machine was doing.
"""

from __future__ import annotations

import json
import math
from typing import Any

from vmtax.targets.base import Target

WINDOW_S = 0.05
TIMEOUT_S = 15.0


def sample(target: Target, window: float = WINDOW_S) -> dict[str, Any]:
    """One noise sample from ``target``; ``{"error": ...}`` when the agent cannot give one
    (an older agent, a broken transport): noise is context, never a reason to stop."""
    try:
        lines = list(target.run_agent(["noise", "--window", repr(float(window))], TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - any transport problem: record it, carry on
        return {"error": " ".join(str(exc).split()) or type(exc).__name__}
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "noise":
            return data
    tail = (target.last_stderr or "").strip().splitlines()
    return {"error": tail[-1] if tail else "the agent printed no noise sample"}


def clock_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> float:
    """Relative change of the core clock from ``before`` to ``after`` (+0.1 = 10% faster),
    from the TSC ticks one dependent add took; NaN when either sample lacks it."""
    a = (before or {}).get("ticks_per_add")
    b = (after or {}).get("ticks_per_add")
    if not a or not b:
        return math.nan
    return float(a) / float(b) - 1.0


def summary(samples: list[dict[str, Any]]) -> dict[str, float]:
    """What the samples of one configuration say, for a one-line report: the largest other
    CPU use, runnable tasks and steal per sample, and the widest clock change from the first."""
    good = [s for s in samples if "error" not in s]
    if not good:
        return {}

    def worst(key: str) -> float:
        values = [float(s[key]) for s in good if s.get(key) is not None]
        return max(values) if values else math.nan

    changes = [abs(clock_change(good[0], s)) for s in good[1:]]
    changes = [c for c in changes if math.isfinite(c)]
    return {
        "other_cpu_pct": worst("other_cpu_pct"),
        "procs_running": worst("procs_running"),
        "steal_ticks": worst("steal_ticks"),
        "clock_change": max(changes) if changes else 0.0,
    }

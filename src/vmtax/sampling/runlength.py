"""How long each run of an adaptive plan lasts.

A run costs its measured part (the duration) plus a fixed part: starting the agent, its
fingerprint and timer calibration, the warm-up, reading and storing the stream. The fixed
part is measured once before the plan is made (the time the agent takes to print its
fingerprint, which every run repeats) and recorded with the choice.

- Short enough to give many runs: the budget shared by every entry and target should give
  each PLANNED_RUNS runs (a look after the STOP_FLOOR and room for one or two more). On a
  virtual machine the spread of run means comes mostly from between runs (the host's
  scheduling and clock states), so more runs narrow the interval of the mean over runs
  where longer ones do not (bench/cpuid_precision.py: 20 runs of 35 ms, not longer runs).
- Long enough to amortise the fixed part and the timer: at least AMORTISE of the fixed
  part (so at least a fifth of each run's time is measuring), and never under
  MIN_DURATION_S (the agent reads its clock at most every 1024 iterations; 30 ms hold
  thousands of values of every per-operation probe).
- Never longer than the suite's own duration for the entry (its upper bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vmtax.sampling.design import STOP_FLOOR

if TYPE_CHECKING:
    from vmtax.plan.plan import Plan

MIN_DURATION_S = 0.03
AMORTISE = 0.25
PLANNED_RUNS = 2 * STOP_FLOOR


def choose(
    entries: dict[str, dict[str, Any]],
    *,
    budget_s: float | None,
    targets: int,
    overhead_s: float,
) -> dict[str, dict[str, Any]]:
    """Set each entry's ``duration`` in place and return what was chosen, per entry."""
    chosen: dict[str, dict[str, Any]] = {}
    share = (
        budget_s / (max(1, len(entries)) * max(1, targets) * PLANNED_RUNS)
        if budget_s is not None
        else None
    )
    for name, entry in entries.items():
        ceiling = entry.get("duration")
        if share is None:
            duration = ceiling
            why = "no budget: the suite's duration"
        else:
            floor = max(MIN_DURATION_S, AMORTISE * overhead_s)
            duration = max(floor, share - overhead_s)
            why = (
                f"budget {budget_s:g} s / ({len(entries)} entries x {targets} targets x "
                f"{PLANNED_RUNS} runs) - {overhead_s:.3f} s per-run overhead, at least "
                f"{floor:.3f} s"
            )
            if ceiling is not None and duration > ceiling:
                duration = ceiling
                why += f", at most the suite's {ceiling:g} s"
            duration = round(duration, 4)
            entry["duration"] = duration
        chosen[name] = {
            "duration_s": duration,
            "iterations": entry.get("iterations"),
            "overhead_s": round(overhead_s, 4),
            "why": why,
        }
    return chosen


def apply(plan: Plan, *, overhead_s: float, fixed: bool) -> None:
    """Choose the run length of an adaptive ``plan`` (unless ``fixed`` by --duration) and
    record the choice in ``plan.sampling["run_length"]``, which is stored with the plan."""
    sampling = plan.sampling
    if sampling is None:
        raise ValueError("a run length is chosen only for an adaptive plan")
    if fixed:
        sampling["run_length"] = {
            name: {"duration_s": e.get("duration"), "iterations": e.get("iterations"),
                   "why": "--duration"}
            for name, e in plan.entries.items()
        }  # fmt: skip
        return
    sampling["run_length"] = choose(
        plan.entries,
        budget_s=sampling.get("budget_s"),
        targets=len(plan.targets),
        overhead_s=overhead_s,
    )

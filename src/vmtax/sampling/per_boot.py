"""How many of a look's extra runs go in the current boot, and when a new boot starts.

Kalibera and Jones ("Rigorous benchmarking in reasonable time", ISMM 2013, §4) choose the
repetitions at the lower level from the variance components and the costs: with a boot costing
``c_boot`` and a run ``c_run``, the runs per boot that give the most precise mean for the time
spent are ``ceil(sqrt(c_boot / c_run · within / between))``
(:meth:`vmtax.stats.boots.VarianceComponents.runs_per_boot`). Each entry that needs more runs
gets that number ``k`` from its own run means and boots. A boot that already holds ``k`` of an
entry's runs has given what it can: when it has for most of those entries, the look's runs go
in a new boot, ``k`` of each entry at most; otherwise they fill the current boot up to ``k``.
An entry whose components cannot be estimated yet (one boot so far, or no boot with two runs)
has no ``k``: its runs are not capped and it does not count toward a new boot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vmtax.stats.boots import variance_components


@dataclass(frozen=True)
class EntryBoots:
    """One entry's runs as the look sees them."""

    #: Kalibera and Jones' runs per boot, or None when the components are not known.
    runs_per_boot: int | None
    #: Its ok runs in the boot the target is in now.
    in_current_boot: int


def entry_boots(
    runs: pd.DataFrame, current_boot: object, boot_cost_s: float, run_cost_s: float
) -> EntryBoots:
    """``runs``: one entry's ok runs (``mean``, ``boot_id``) on one target."""
    means = pd.to_numeric(runs["mean"], errors="coerce").to_numpy(dtype=np.float64)
    boots = [b if isinstance(b, str) else "" for b in runs["boot_id"]]
    here = sum(1 for b in boots if b == _key(current_boot))
    k: int | None = None
    if means.size >= 3 and np.all(means > 0):
        comp = variance_components(np.log(means), boots)
        try:
            k = comp.runs_per_boot(boot_cost_s, run_cost_s)
        except ValueError:  # one boot so far, no boot with two runs, or an unknown cost
            k = None
    return EntryBoots(k, here)


def place(wanted: dict[str, int], entries: dict[str, EntryBoots]) -> tuple[bool, dict[str, int]]:
    """``(new boot, runs of each entry in this look)`` for the entries in ``wanted`` (the runs
    each still needs); see the module's docstring."""
    known = {n: e for n, e in entries.items() if n in wanted and e.runs_per_boot is not None}
    full = sum(1 for e in known.values() if e.in_current_boot >= (e.runs_per_boot or 0))
    new_boot = bool(known) and full > len(known) / 2
    out: dict[str, int] = {}
    for name, want in wanted.items():
        e = entries.get(name)
        k = e.runs_per_boot if e is not None else None
        if k is None:
            out[name] = want
            continue
        room = k if new_boot else k - e.in_current_boot  # type: ignore[union-attr]
        # An entry whose boot is full while most others' are not keeps going in it, a boot's
        # worth at a time: the look must not stall it.
        out[name] = max(1, min(want, room if room > 0 else k))
    return new_boot, out


def run_cost(wall_s: pd.Series | None, planned_s: float | None) -> float:
    """A run's cost in seconds: the median wall time of its stored runs, else the seconds the
    plan gives it, else NaN (the runs per boot are then not known)."""
    if wall_s is not None:
        walls = pd.to_numeric(wall_s, errors="coerce").to_numpy(dtype=np.float64)
        walls = walls[np.isfinite(walls) & (walls > 0)]
        if walls.size:
            return float(np.median(walls))
    if planned_s is not None and math.isfinite(planned_s) and planned_s > 0:
        return float(planned_s)
    return math.nan


def _key(boot: object) -> str:
    return boot if isinstance(boot, str) else ""

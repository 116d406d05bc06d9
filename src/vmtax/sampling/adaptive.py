"""The adaptive loop: the runner's step source for a plan with ``sampling`` settings.

For each target (one configuration) it yields the planned first ``min_runs`` rounds, then
looks: the run means of every entry so far go through :func:`vmtax.sampling.design.look`,
and the entries that are not precise yet get the runs the look planned, in rounds whose
order is shuffled with a seeded RNG (as the plan's own rounds are), so a slow drift of the
machine spreads over every probe; levels on one machine take turns run by run, so they share
the noise too. Steps stop being handed out when the time budget is spent, which depends on
the clock, not on the values measured.

A guest level measured in several boots (``--boots``) gets the extra runs of a look in its
current boot, or in a new boot, as many per boot as Kalibera and Jones' formula picks from each
entry's variance components and the costs of a boot and a run (:mod:`vmtax.sampling.per_boot`):
once a boot holds that many runs, more runs in it add less than a new boot would, since every
one of them shares that boot's offset.

Every look is stored with the noise sampled just before the runs it judges and just after
them; when the loop ends, each entry's outcome (precise or imprecise, the half-width reached,
the run length chosen). Resume: completed runs are in the store and count as they are; new
steps get plan indices above every stored one; the budget left is the budget minus what the
stored looks had spent.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vmtax.plan.plan import Plan, Step, boots_of
from vmtax.sampling import design, noise, per_boot
from vmtax.stats.boots import variance_components
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.targets.base import Target

if TYPE_CHECKING:
    from vmtax.store import Store

StoreCall = Callable[..., Any]


class AdaptiveSampler:
    """Callable as the runner's ``step_source``: ``(slot, config_id, target, planned,
    store_call) -> steps``. One instance serves every target of an experiment."""

    def __init__(
        self,
        store: Store,
        plan: Plan,
        experiment_id: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sample_noise: Callable[[Target], dict[str, Any]] = noise.sample,
        started: float | None = None,
    ) -> None:
        """``started``: when the budget began on ``clock`` (the start of the `vmtax run`
        command, so the budget bounds the command and not only the measuring); now if None."""
        if not plan.sampling:
            raise ValueError("the plan has no sampling settings")
        s = plan.sampling
        self.store = store
        self.plan = plan
        self.experiment_id = experiment_id
        self.target = float(s["precision"])
        self.budget = s.get("budget_s")
        self.min_runs = int(s.get("min_runs", design.STOP_FLOOR))
        self.max_runs = int(s.get("max_runs", 1000))
        self.confidence = float(s.get("confidence", design.CONFIDENCE))
        self._clock = clock
        self._noise = sample_noise
        self._lock = threading.Lock()
        spent, top = _resume_point(store, experiment_id)
        self._start = (clock() if started is None else started) - spent
        self._next_index = max(len(plan.steps), top + 1)

    def spent(self) -> float:
        """Seconds of the budget used so far (this session plus what stored looks had spent)."""
        return self._clock() - self._start

    def budget_left(self) -> bool:
        return self.budget is None or self.spent() < float(self.budget)

    def __call__(
        self,
        slot: int,
        config_id: int,
        target: Target,
        planned: list[Step],
        store_call: StoreCall,
    ) -> Iterator[Step]:
        before = self._noise(target)
        yield from planned
        boot = max((s.boot for s in planned), default=0)
        rebootable = boots_of(self.plan.targets[slot]) > 1 if self.plan.targets else False
        look_no = 0
        while True:
            after = self._noise(target)
            runs = store_call(self._runs_of, config_id=config_id)
            decisions = self._decide(runs)
            more = {n: d for n, d in decisions.items() if d["status"] == "more"}
            pending = wanted = {n: d["next_n"] - d["n"] for n, d in more.items()}
            if rebootable:
                new_boot, pending = per_boot.place(
                    wanted,
                    {
                        n: per_boot.EntryBoots(d["runs_per_boot"], d["in_current_boot"])
                        for n, d in decisions.items()
                    },
                )
                if new_boot:
                    boot += 1
            for name, count in pending.items():
                decisions[name].update(boot=boot, runs_this_look=count)
            store_call(
                self._record_look,
                config_id=config_id,
                look=look_no,
                decisions=decisions,
                before=before,
                after=after,
            )
            if not pending or not self.budget_left():
                store_call(self._record_outcomes, config_id=config_id, decisions=decisions)
                return
            look_no += 1
            before = after
            for step in self._rounds(slot, look_no, pending, decisions, boot):
                if not self.budget_left():
                    break
                yield step

    # -- deciding --------------------------------------------------------------------------

    def _runs_of(self, config_id: int) -> pd.DataFrame:
        return self.store.sampling.runs(self.experiment_id, config_id)

    def _decide(self, runs: pd.DataFrame) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        # The boot the target is in now: its latest run's.
        current = runs["boot_id"].iloc[int(np.argmax(runs["plan_index"]))] if len(runs) else None
        boot_cost = float((self.plan.sampling or {}).get("boot_cost_s", BOOT_COST_S))
        lengths = (self.plan.sampling or {}).get("run_length") or {}
        for name, entry in self.plan.entries.items():
            mine = runs[runs["probe"] == name]
            ok_rows = mine[mine["status"] == "ok"]
            ok = ok_rows["mean"].astype(float).to_numpy()
            share = between_share_of(ok, ok_rows["boot_id"])
            planned = (lengths.get(name) or {}).get("duration_s", entry.get("duration"))
            cost = per_boot.run_cost(ok_rows.get("wall_s"), planned)
            placed = per_boot.entry_boots(ok_rows, current, boot_cost, cost)
            bad = int((mine["status"] != "ok").sum())
            result = design.look(
                ok, self.target, min_runs=self.min_runs, confidence=self.confidence
            )
            if result.precise:
                status = "precise"
            elif bad >= 2 and bad >= ok.size:
                status = "failed"  # the probe keeps failing here: more runs will not help
            elif result.n >= self.max_runs:
                status = "max_runs"
            else:
                status = "more"
            out[name] = {
                "n": result.n,
                "failed_runs": bad,
                "mean": result.mean if np.isfinite(result.mean) else None,
                "half_width": result.half_width if np.isfinite(result.half_width) else None,
                "status": status,
                "next_n": min(result.next_n, self.max_runs),
                "between_share": share,
                "runs_per_boot": placed.runs_per_boot,
                "in_current_boot": placed.in_current_boot,
            }
        return out

    def _rounds(
        self,
        slot: int,
        look_no: int,
        pending: dict[str, int],
        decisions: dict[str, Any],
        boot: int = 0,
    ) -> Iterator[Step]:
        # The same order on every replay of this look: seeded by the plan, target and look.
        rng = random.Random(f"{self.plan.seed}:{slot}:{look_no}")
        for r in range(max(pending.values())):
            names = sorted(n for n, more in pending.items() if r < more)
            rng.shuffle(names)
            for name in names:
                with self._lock:
                    index = self._next_index
                    self._next_index += 1
                yield Step(
                    index=index,
                    target=slot,
                    entry=name,
                    run=decisions[name]["n"] + decisions[name]["failed_runs"] + r,
                    boot=boot,
                )

    # -- recording -------------------------------------------------------------------------

    def _record_look(
        self,
        config_id: int,
        look: int,
        decisions: dict[str, Any],
        before: dict[str, Any],
        after: dict[str, Any],
    ) -> None:
        values = {
            "experiment_id": self.experiment_id,
            "configuration_id": config_id,
            "look": look,
            "spent_s": self.spent(),
            "decisions": decisions,
            "noise_before": before,
            "noise_after": after,
            "created_at": datetime.now(UTC),
        }
        self.store.sampling.add_look(values)

    def _record_outcomes(self, config_id: int, decisions: dict[str, Any]) -> None:
        lengths = (self.plan.sampling or {}).get("run_length") or {}
        budget_spent = not self.budget_left()
        rows = []
        for name, d in decisions.items():
            precise = d["status"] == "precise"
            if precise:
                reason = "target"
            elif d["status"] in ("failed", "max_runs"):
                reason = d["status"]
            else:
                reason = "budget" if budget_spent else "stopped"
            entry = self.plan.entries[name]
            rows.append(
                {
                    "configuration_id": config_id,
                    "probe": name,
                    "experiment_id": self.experiment_id,
                    "n_runs": d["n"],
                    "mean": d["mean"],
                    "half_width": d["half_width"],
                    "target": self.target,
                    "status": "precise" if precise else "imprecise",
                    "reason": reason,
                    "duration_s": (lengths.get(name) or {}).get(
                        "duration_s", entry.get("duration")
                    ),
                    "iterations": entry.get("iterations"),
                    "updated_at": datetime.now(UTC),
                }
            )
        self.store.sampling.set_outcomes(config_id, rows)


def between_share_of(means: np.ndarray, boot_ids: pd.Series) -> float | None:
    """The between-boot share of the variance of log run means; None when undefined."""
    if means.size < 3 or not np.all(means > 0):
        return None
    # Runs stored without a boot id were measured in the configuration's one boot.
    boots = [b if isinstance(b, str) else "" for b in boot_ids]
    share = variance_components(np.log(means), boots).between_share
    return float(share) if np.isfinite(share) else None


def _resume_point(store: Store, experiment_id: int) -> tuple[float, int]:
    """Budget seconds the stored looks had spent, and the highest stored plan index."""
    spent, top = store.sampling.resume_point(experiment_id)
    return float(spent or 0.0), int(top if top is not None else -1)

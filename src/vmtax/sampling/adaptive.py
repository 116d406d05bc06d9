"""The adaptive loop: the runner's step source for a plan with ``sampling`` settings.

For each target (one configuration) it yields the planned first ``min_runs`` rounds, then
looks: the run means of every entry so far go through :func:`vmtax.sampling.design.look`,
and the entries that are not precise yet get the runs the look planned, in rounds whose
order is shuffled with a seeded RNG (as the plan's own rounds are), so a slow drift of the
machine spreads over every probe; levels on one machine take turns run by run, so they share
the noise too. Steps stop being handed out when the time budget is spent, which depends on
the clock, not on the values measured.

A guest level measured in several boots (``--boots``) is judged at the unit that varies: an
entry is precise when the boot-level interval `compare` prints (its boot means) is within the
target, from 3 boots on (:mod:`vmtax.sampling.boot_design`). Each planned boot is filled to
the runs its entries' run noise asks for before it is left; after the planned boots, a look
plans new boots and the runs per boot in them, Kalibera and Jones' problem solved from where
the experiment stands, and hands out their runs boot by boot. A guest level in one boot is
never precise about its configuration (its outcome says ``one boot``).

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

from vmtax.plan.plan import Plan, Step
from vmtax.sampling import boot_design, design, noise, per_boot
from vmtax.stats.boots import variance_components
from vmtax.stats.compare_options import BOOT_COST_S
from vmtax.targets.base import Target
from vmtax.targets.spec import LevelSpec, parse_spec

if TYPE_CHECKING:
    from vmtax.store import Store

StoreCall = Callable[..., Any]
#: Looks at most at the end of a planned boot before it is left (each tops it up).
_FILL_LOOKS = 8


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
        self._last: dict[int, int] = {}
        #: Each guest's measured boot times so far (its target's ``boot_seconds``), by slot.
        self._boot_seconds: dict[int, list[float]] = {}

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
        for step in self._steps(slot, config_id, target, planned, store_call):
            self._last[slot] = step.index  # the boot the target is in: this step's
            yield step

    def _steps(
        self,
        slot: int,
        config_id: int,
        target: Target,
        planned: list[Step],
        store_call: StoreCall,
    ) -> Iterator[Step]:
        before = self._noise(target)
        spec = parse_spec(self.plan.targets[slot]) if self.plan.targets else None
        rebootable = spec is not None and spec.boot_count > 1
        # A guest measured in one boot: its runs say nothing about the next boot.
        one_boot = isinstance(spec, LevelSpec) and spec.is_guest and not rebootable
        if spec is not None and rebootable:
            # Before a planned boot is left, it gets the runs its entries' run noise asks for
            # (boot_design.first_stage_runs): a boot cannot be gone back to.
            for boot_no in sorted({s.boot for s in planned}):
                yield from (s for s in planned if s.boot == boot_no)
                # Runs estimate the run noise better as they come: top up, look again.
                for _ in range(_FILL_LOOKS):
                    runs = store_call(self._runs_of, config_id=config_id)
                    last = self._last.get(slot, -1)
                    fill = list(self._fill_boot(slot, runs, boot_no, spec.boot_count, last))
                    if not fill:
                        break
                    for step in fill:
                        if not self.budget_left():
                            break
                        yield step
        else:
            yield from planned
        boot = max((s.boot for s in planned), default=0)
        look_no = 0
        while True:
            after = self._noise(target)
            runs = store_call(self._runs_of, config_id=config_id)
            boot_cost, boot_cost_from = self._boot_cost(slot, target)
            decisions = self._decide(
                runs, by_boot=rebootable, one_boot=one_boot, last_index=self._last.get(slot),
                boot_cost=boot_cost,
            )  # fmt: skip
            if rebootable:  # said with every look: which boot cost planned its boots
                for d in decisions.values():
                    d["boot_cost_s"], d["boot_cost_from"] = round(boot_cost, 3), boot_cost_from
            more = {n: d for n, d in decisions.items() if d["status"] == "more"}
            if rebootable:
                segments = self._boot_segments(more, boot, boot_cost)
            else:
                wanted = {n: d["next_n"] - d["n"] for n, d in more.items()}
                segments = [(boot, wanted)] if wanted else []
            for seg_boot, pending in segments:
                for name, count in pending.items():
                    d = decisions[name]
                    d["runs_this_look"] = d.get("runs_this_look", 0) + count
                    d["boot"] = seg_boot
            store_call(
                self._record_look,
                config_id=config_id,
                look=look_no,
                decisions=decisions,
                before=before,
                after=after,
            )
            if not segments or not self.budget_left():
                store_call(self._record_outcomes, config_id=config_id, decisions=decisions)
                return
            look_no += 1
            before = after
            done: dict[str, int] = {}
            for seg_boot, pending in segments:
                boot = seg_boot
                for step in self._rounds(slot, look_no, pending, decisions, seg_boot, done):
                    if not self.budget_left():
                        break
                    yield step
                for name, count in pending.items():
                    done[name] = done.get(name, 0) + count
                if not self.budget_left():
                    break

    def _fill_boot(
        self, slot: int, runs: pd.DataFrame, boot: int, planned_boots: int, last_index: int
    ) -> Iterator[Step]:
        """The runs that top up the boot just measured to each entry's first-stage runs."""
        if not len(runs):
            return
        current = _current_boot(runs, last_index)
        wanted: dict[str, int] = {}
        counts: dict[str, int] = {}
        probes = runs["probe"].to_numpy(dtype=object)
        good = runs["status"].to_numpy(dtype=object) == "ok"
        means = pd.to_numeric(runs["mean"], errors="coerce").to_numpy(dtype=np.float64)
        boots = runs["boot_id"].to_numpy(dtype=object)
        for name in self.plan.entries:
            mine = probes == name
            ok = mine & good
            counts[name] = int(mine.sum())
            k = boot_design.first_stage_runs(
                means[ok], list(boots[ok]), self.target,
                max(boot_design.BOOT_FLOOR, planned_boots), confidence=self.confidence,
            )  # fmt: skip
            here = int(np.sum(boots[ok] == current))
            # at most doubling the boot's runs a look: the run noise is re-estimated on the way
            more = min(k - here, max(here, 1), self.max_runs - int(ok.sum()))
            if more > 0:
                wanted[name] = more
        if not wanted:
            return
        rng = random.Random(f"{self.plan.seed}:{slot}:fill:{boot}")
        for r in range(max(wanted.values())):
            names = sorted(n for n, more in wanted.items() if r < more)
            rng.shuffle(names)
            for name in names:
                if not self.budget_left():
                    return
                with self._lock:
                    index = self._next_index
                    self._next_index += 1
                yield Step(index=index, target=slot, entry=name, run=counts[name] + r, boot=boot)

    def _boot_cost(self, slot: int, target: Target) -> tuple[float, str]:
        """What one boot of this guest costs, in seconds, and where that came from: the
        run's --boot-cost when given; else the median of this guest's boots so far as its
        target timed them (power-on to the agent's ready line, ``boot_seconds``); else the
        plan's (a noise profile's measured cost, or BOOT_COST_S) until the first boot."""
        sampling = self.plan.sampling or {}
        planned = float(sampling.get("boot_cost_s", BOOT_COST_S))
        if sampling.get("boot_cost_given"):
            return planned, "--boot-cost"
        seen = getattr(target, "boot_seconds", None)
        times = self._boot_seconds.setdefault(slot, [])
        if isinstance(seen, int | float) and seen > 0 and (not times or times[-1] != seen):
            times.append(float(seen))
        if times:
            n = len(times)
            return float(np.median(times)), f"measured over {n} boot{'s' if n > 1 else ''}"
        return planned, "default"

    def _boot_segments(
        self, more: dict[str, dict[str, Any]], boot: int, boot_cost: float | None = None
    ) -> list[tuple[int, dict[str, int]]]:
        """The look's runs of a guest measured in boots, boot by boot: the current boot topped
        up, then new boots (vmtax.sampling.boot_design)."""
        if not more:
            return []
        plan = boot_design.plan_boots(
            {n: d["_look"] for n, d in more.items()},
            self.target,
            boot_cost
            if boot_cost is not None
            else float((self.plan.sampling or {}).get("boot_cost_s", BOOT_COST_S)),
            {n: d["_run_cost"] for n, d in more.items()},
            confidence=self.confidence,
        )
        for name, d in more.items():
            d["runs_per_boot"] = plan.per_boot.get(name, d["runs_per_boot"])
            d["new_boots"] = plan.new_boots
            d["next_n"] = min(
                self.max_runs,
                d["n"] + plan.top_up.get(name, 0) + plan.new_boots * plan.per_boot.get(name, 0),
            )
        segments = []
        if plan.top_up:
            segments.append((boot, dict(plan.top_up)))
        for i in range(plan.new_boots):
            segments.append((boot + 1 + i, dict(plan.per_boot)))
        # The run limit caps each entry's runs in this look.
        left = {n: d["next_n"] - d["n"] for n, d in more.items()}
        capped = []
        for b, pending in segments:
            part = {n: min(c, left[n]) for n, c in pending.items() if left[n] > 0}
            for n, c in part.items():
                left[n] -= c
            if part := {n: c for n, c in part.items() if c > 0}:
                capped.append((b, part))
        return capped

    # -- deciding --------------------------------------------------------------------------

    def _runs_of(self, config_id: int) -> pd.DataFrame:
        return self.store.sampling.runs(self.experiment_id, config_id)

    def _decide(
        self,
        runs: pd.DataFrame,
        *,
        by_boot: bool = False,
        one_boot: bool = False,
        last_index: int | None = None,
        boot_cost: float | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Each entry's look. ``by_boot``: the target is a guest measured in boots, and precision
        is that of the boot-level interval compare prints (vmtax.sampling.boot_design);
        otherwise the run-level design. ``one_boot``: a guest in a single boot, whose runs
        never make a probe precise about its configuration (its sampling stops when they are
        precise about this boot: more runs in it cannot say more)."""
        out: dict[str, dict[str, Any]] = {}
        # The boot the target is in now: its latest run's.
        current = _current_boot(runs, last_index)
        if boot_cost is None:
            boot_cost = float((self.plan.sampling or {}).get("boot_cost_s", BOOT_COST_S))
        lengths = (self.plan.sampling or {}).get("run_length") or {}
        probes = runs["probe"].to_numpy(dtype=object)
        good = runs["status"].to_numpy(dtype=object) == "ok"
        for name, entry in self.plan.entries.items():
            here = probes == name
            mine = runs[here] if len(runs) else runs
            ok_rows = runs[here & good] if len(mine) else mine
            ok = ok_rows["mean"].astype(float).to_numpy() if len(ok_rows) else np.zeros(0)
            share = between_share_of(ok, ok_rows["boot_id"]) if len(ok_rows) else None
            planned = (lengths.get(name) or {}).get("duration_s", entry.get("duration"))
            cost = per_boot.run_cost(ok_rows.get("wall_s") if len(ok_rows) else None, planned)
            placed = (
                per_boot.entry_boots(ok_rows, current, boot_cost, cost)
                if len(ok_rows)
                else per_boot.EntryBoots(None, 0)
            )
            bad = int((mine["status"] != "ok").sum()) if len(mine) else 0
            boot_look = None
            if by_boot:
                boot_look = boot_design.boot_look(
                    ok, list(ok_rows["boot_id"]) if len(ok_rows) else [], current,
                    self.target, confidence=self.confidence,
                )  # fmt: skip
                result = design.Look(
                    n=boot_look.n, mean=boot_look.mean, half_width=boot_look.half_width,
                    precise=boot_look.precise, next_n=boot_look.n,
                )  # fmt: skip
            else:
                result = design.look(
                    ok, self.target, min_runs=self.min_runs, confidence=self.confidence
                )
            if result.precise:
                status = "one_boot" if one_boot else "precise"
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
            if boot_look is not None:
                out[name]["boots"] = boot_look.boots
                out[name]["_look"] = boot_look
                out[name]["_run_cost"] = cost
        return out

    def _rounds(
        self,
        slot: int,
        look_no: int,
        pending: dict[str, int],
        decisions: dict[str, Any],
        boot: int = 0,
        done: dict[str, int] | None = None,
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
                    run=decisions[name]["n"]
                    + decisions[name]["failed_runs"]
                    + (done or {}).get(name, 0)
                    + r,
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
            "decisions": {
                n: {k: v for k, v in d.items() if not k.startswith("_")}
                for n, d in decisions.items()
            },
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
            elif d["status"] in ("failed", "max_runs", "one_boot"):
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


def _current_boot(runs: pd.DataFrame, last_index: int | None) -> object:
    """The boot the target is in now: that of the last step handed out (when its run is
    stored), else that of the run with the highest plan index."""
    if not len(runs):
        return None
    index = runs["plan_index"].to_numpy()
    boots = runs["boot_id"].to_numpy(dtype=object)
    if last_index is not None:
        hit = np.flatnonzero(index == last_index)
        if hit.size:
            return boots[hit[0]]
    return boots[int(np.argmax(index))]


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

"""The experiment plan: every run of every entry on every target, in a recorded random order.

Runs are the independent unit inside a boot, and boots above them: a guest level is measured
in ``boots`` boots of its guest, each entry's runs split over them boot by boot. The order is
built in rounds: round r holds run r of every entry, shuffled with a seeded RNG, so a slow
drift of the machine spreads over all probes instead of landing on one; within a boot's rounds
the levels still take turns run by run. The seed is stored with the plan, so the order can be
replayed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vmtax.contract import known_env_args
from vmtax.plan.suite import Entry, MemoryScale, Suite
from vmtax.targets.spec import TargetSpec, parse_spec


def kill_after(timeout: float) -> float:
    """When the controller kills an agent that ignores its own --timeout: a little later, so
    the agent can stop by itself and still send its end record."""
    return timeout + max(2.0, 0.25 * timeout)


@dataclass(frozen=True)
class Step:
    """One planned run: entry ``entry`` run number ``run`` on target slot ``target``, in
    that target's boot number ``boot`` (0 for a target with one boot)."""

    index: int
    target: int
    entry: str
    run: int
    boot: int = 0


@dataclass(frozen=True)
class Invocation:
    """The agent arguments of one step, resolved for a target, and any scaling applied."""

    args: list[str]
    timeout: float
    scaling: dict[str, Any] | None


class Plan:
    """Entries (resolved settings) plus the ordered steps, serialisable into the store."""

    def __init__(
        self,
        *,
        suite: str,
        source: str,
        seed: int,
        entries: dict[str, dict[str, Any]],
        steps: list[Step],
        targets: Sequence[TargetSpec | dict[str, Any]],
        sampling: dict[str, Any] | None = None,
    ) -> None:
        self.suite = suite
        self.source = source
        self.seed = seed
        self.entries = entries
        self.steps = steps
        #: Typed until stored: ``to_dict`` writes each one's record.
        self.targets: list[TargetSpec] = [parse_spec(t) for t in targets]
        #: Adaptive sampling settings (precision, budget_s, min_runs, ...) or None for a
        #: fixed number of runs; the steps then hold the first min_runs rounds only.
        self.sampling = sampling

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "source": self.source,
            "seed": self.seed,
            "order": "rounds: run r of every entry, shuffled per round with random.Random(seed); "
            "each entry's run on every target in turn, the targets shuffled too; each entry's "
            "runs split into equal consecutive parts, one per boot, boot by boot",
            "entries": self.entries,
            "targets": [t.to_record() for t in self.targets],
            "steps": [[s.target, s.entry, s.run, s.boot] for s in self.steps],
        } | ({"sampling": self.sampling} if self.sampling else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        # Plans stored before boots list [target, entry, run]: one boot per target.
        steps = [
            Step(index=i, target=int(t), entry=str(e), run=int(r), boot=int(b[0]) if b else 0)
            for i, (t, e, r, *b) in enumerate(data["steps"])
        ]
        return cls(
            suite=data["suite"],
            source=data.get("source", ""),
            seed=int(data["seed"]),
            entries=data["entries"],
            steps=steps,
            targets=list(data.get("targets", [])),
            sampling=data.get("sampling"),
        )

    def probes(self) -> set[str]:
        return {e["probe"] for e in self.entries.values()}

    def steps_for(self, target: int) -> list[Step]:
        return [s for s in self.steps if s.target == target]

    def invocation(
        self, step: Step, memory_bytes: int | None, *, tsc_hz: float | None = None
    ) -> Invocation:
        """Agent arguments for ``step``; memory-scaled parameters use the target's RAM.

        ``tsc_hz``: the target's TSC rate from its fingerprint. Given, the run reuses it and
        that fingerprint's nesting estimate (``--tsc-hz``, ``--brief-env``) instead of
        spending about 70 ms on finding them again, which is most of a short run's fixed cost.
        """
        e = self.entries[step.entry]
        params = dict(e["params"])
        iterations = e.get("iterations")
        scaling: dict[str, Any] | None = None
        if e.get("scale_to_memory") and memory_bytes:
            rules: list[dict[str, Any]] = []
            values: dict[str, int] = {}
            scaling = {"memory_bytes": memory_bytes, "rules": rules, "values": values}
            for rule in e["scale_to_memory"]:
                scale = MemoryScale.model_validate(rule)
                value = scale.value(memory_bytes, params)
                if scale.param == "iterations":
                    iterations = value
                else:
                    params[scale.param] = value
                rules.append(scale.model_dump())
                values[scale.param] = value
        args = ["run", e["probe"], "--runs", "1"]
        if iterations is not None:
            args += ["--iterations", str(iterations)]
        if e.get("duration") is not None:
            args += ["--duration", _num(e["duration"])]
        if e.get("warmup") is not None:
            args += ["--warmup", str(e["warmup"])]
        args += ["--timeout", _num(e["timeout"])]
        if e.get("cpus"):
            args += ["--cpus", str(e["cpus"])]
        for key, val in params.items():
            args += ["--param", f"{key}={_param(val)}"]
        args += known_env_args(tsc_hz)
        return Invocation(args=args, timeout=kill_after(float(e["timeout"])), scaling=scaling)


def boots_of(target: TargetSpec | dict[str, Any]) -> int:
    """How many boots a plan's target spec asks for (1 unless it is a guest level)."""
    return parse_spec(target).boot_count


def boot_parts(runs: int, parts: int) -> list[range]:
    """Runs 0..runs-1 split into ``parts`` consecutive parts as equal as can be, the first
    ones taking the remainder (7 runs in 3 parts: 0-2, 3-4, 5-6; 2 runs in 3: 0, 1 and none),
    so a boot is never left empty while a later one has runs."""
    return [range(-(-p * runs // parts), -(-(p + 1) * runs // parts)) for p in range(parts)]


def interleaved_steps(
    entries: dict[str, dict[str, Any]],
    n_targets: int,
    rng: random.Random,
    boots: list[int] | None = None,
) -> list[Step]:
    """Rounds of every entry in a shuffled order; within an entry's turn, every target in a
    shuffled order. Targets that share a machine run in exactly this order (the runner's
    turns), so the levels alternate run by run (ABBA-like, never A A A ... B B B), and which
    level goes first is random rather than always the baseline.

    ``boots[t]`` is how many boots target t is measured in. The rounds go in phases, one per
    boot of the target with the most: phase p holds part p of every entry's runs
    (``boot_parts``), and target t runs phase p in its boot ``p * boots[t] // phases``. So a
    guest's boots come one after the other, each with its share of every entry's runs, while
    a target with one boot (this machine) keeps taking its turns beside it. With one boot
    everywhere this is the plain rounds order, draw for draw."""
    boots = list(boots) if boots is not None else [1] * n_targets
    phases = max(boots, default=1)
    steps: list[Step] = []
    for phase in range(phases):
        parts = {k: boot_parts(e["runs"], phases)[phase] for k, e in entries.items()}
        rounds = max((len(p) for p in parts.values()), default=0)
        for k in range(rounds):
            names = [name for name, part in parts.items() if k < len(part)]
            rng.shuffle(names)
            for name in names:
                order = list(range(n_targets))
                rng.shuffle(order)
                for t in order:
                    steps.append(
                        Step(
                            index=len(steps), target=t, entry=name, run=parts[name][k],
                            boot=phase * boots[t] // phases,
                        )
                    )  # fmt: skip
    return steps


def build_plan(
    suite: Suite,
    *,
    source: str,
    seed: int,
    targets: Sequence[TargetSpec | dict[str, Any]],
    probes: list[str] | None = None,
    runs: int | None = None,
    timeout: float | None = None,
    duration: float | None = None,
    precision: float | None = None,
    budget: float | None = None,
    min_runs: int | None = None,
    first_stage_runs: int | None = None,
) -> Plan:
    """Resolve the suite (with the user's --probe / --runs) into an ordered plan.

    Sampling is adaptive when a precision is asked for (``precision`` here, else the
    suite's, unless ``runs`` fixes the number of runs): every entry then gets ``min_runs``
    planned runs and the adaptive loop (vmtax.sampling) adds the rest while it runs.
    ``first_stage_runs`` (a noise profile's design, its boots in the targets' specs) plans at
    least that many runs of each entry before the first look.
    """
    chosen = _select(suite, probes)
    sampling = _sampling(suite, runs=runs, precision=precision, budget=budget, min_runs=min_runs)
    if sampling is not None and first_stage_runs is not None:
        sampling["min_runs"] = max(int(sampling["min_runs"]), int(first_stage_runs))
    if sampling is not None:
        # The family a comparison of these targets tests: each probe against the baseline.
        family = len(chosen) * max(len(targets) - 1, 0)
        sampling.update(_reachable(family, sampling["min_runs"], explicit=min_runs is not None))
    if sampling is not None:
        runs = sampling["min_runs"]
    entries: dict[str, dict[str, Any]] = {}
    for entry in chosen:
        settings = suite.resolved(entry)
        if runs is not None:
            settings = settings.model_copy(update={"runs": runs})
        if timeout is not None:
            settings = settings.model_copy(update={"timeout": timeout})
        if duration is not None:
            settings = settings.model_copy(update={"duration": duration})
        entries[entry.key] = {
            "probe": entry.probe,
            **settings.model_dump(),
            "params": dict(entry.params),
            "scale_to_memory": [s.model_dump() for s in entry.scale_to_memory],
        }
    steps = interleaved_steps(
        entries, len(targets), random.Random(seed), [boots_of(t) for t in targets]
    )
    return Plan(
        suite=suite.name,
        source=source,
        seed=seed,
        entries=entries,
        steps=steps,
        targets=targets,
        sampling=sampling,
    )


#: Adaptive sampling without a time budget still stops at this many runs of an entry.
MAX_ADAPTIVE_RUNS = 1000


def _sampling(
    suite: Suite,
    *,
    runs: int | None,
    precision: float | None,
    budget: float | None,
    min_runs: int | None,
) -> dict[str, Any] | None:
    target = precision if precision is not None else (None if runs else suite.precision)
    if target is None:
        return None
    floor = min_runs if min_runs is not None else suite.min_runs
    return {
        "precision": float(target),
        "budget_s": float(budget) if budget is not None else suite.budget,
        "min_runs": int(floor),
        "max_runs": MAX_ADAPTIVE_RUNS,
        "confidence": 0.95,
    }


def _reachable(family: int, floor: int, *, explicit: bool) -> dict[str, Any]:
    """Raise the run floor until a verdict is possible for ``family`` comparisons (see
    ``stats.significance.significance_floor``); an explicit --min-runs below it is kept,
    with the reason no verdict can come, said before anything is measured."""
    # heavy: scipy and statsmodels, only when a plan targets a precision
    from vmtax.stats.significance import significance_floor

    if family < 1:
        return {}
    needed = significance_floor(family)
    if needed is None or needed <= floor:
        return {}
    if explicit:
        return {
            "unreachable": f"with {floor} runs a side and {family} comparisons (Holm), no "
            f"verdict is possible: the smallest adjusted p is above 0.05; --min-runs {needed} "
            "makes one possible"
        }
    return {"min_runs": needed, "raised_for": family}


def _select(suite: Suite, probes: list[str] | None) -> list[Entry]:
    # --probe NAME keeps the suite's entries for that probe (or entry name); a probe the suite
    # does not mention runs with the suite's defaults.
    if not probes:
        return list(suite.probes)
    out: list[Entry] = []
    for name in dict.fromkeys(probes):
        matches = [e for e in suite.probes if name in (e.probe, e.key)]
        out.extend(m for m in matches if m not in out)
        if not matches:
            out.append(Entry(probe=name))
    return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _param(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)

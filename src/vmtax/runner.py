"""Runs on the execution engine (``vmtax.execution``): a plan's steps on its targets, a lane
per target, each run stored as soon as it ends.

Each target is fingerprinted (``env``), gets its configuration, then runs its share of the
plan one step at a time: one agent invocation per run, read with ``read_stream``. A complete
run is committed before the next starts; a run that broke off is stored as ``lost`` and one
the agent refused as ``failed``, so nothing is silently dropped. Targets run concurrently; a
target that fails (cannot boot, goes away) is reported and the others carry on. On Ctrl-C or
SIGTERM the agents in flight are killed, what finished stays stored, and the experiment is
marked interrupted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vmtax.contract import Fingerprint, ProbeInfo, read_stream, startup_args
from vmtax.doctor.leftovers import controller_alive as controller_alive  # re-exported
from vmtax.doctor.leftovers import controller_identity as controller_identity  # re-exported
from vmtax.errors import UsageError, VmtaxError
from vmtax.execution import Engine, NoProgress, Progress, Stopped, Storing
from vmtax.plan.plan import Plan, Step
from vmtax.store.runtimes import RunTimes
from vmtax.targets.agent import ENV_TIMEOUT_S, fingerprint
from vmtax.targets.agent import list_probes as list_probes  # re-exported
from vmtax.targets.base import AgentTimeout, Target, TargetError
from vmtax.turns import Turns
from vmtax.workloads import infos as workload_infos
from vmtax.workloads import run_lines

if TYPE_CHECKING:
    from vmtax.store import Store

#: A target whose runs are lost this many times in a row is given up (it is probably gone).
MAX_CONSECUTIVE_LOST = 3
_EMPTY = np.empty(0, dtype=np.float64)


class RunObserver(Protocol):
    """Told about each run (e.g. ``vmtax.hostprof.recorder``): before it starts and after it
    is stored, with its run id and status. An observer must not raise."""

    def before_run(self, target: Target, step: Step, args: list[str]) -> None: ...
    def after_run(self, target: Target, step: Step, run_id: int, status: str) -> None: ...


@dataclass
class TargetOutcome:
    name: str
    level: str
    config: str = ""
    ok: int = 0
    failed: int = 0
    lost: int = 0
    skipped: int = 0
    error: str | None = None
    first_problem: str | None = None


@dataclass
class Outcome:
    experiment_id: int
    status: str
    targets: list[TargetOutcome] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return sum(t.failed + t.lost for t in self.targets) + sum(
            1 for t in self.targets if t.error
        )

    def summary_error(self) -> str | None:
        """One line describing what went wrong, or None when every run is ok."""
        bad = [t for t in self.targets if t.error or t.failed or t.lost]
        if not bad:
            return None
        parts = []
        for t in bad:
            if t.error:
                parts.append(f"target {t.name} failed: {t.error}")
            else:
                parts.append(
                    f"target {t.name}: {t.failed} failed and {t.lost} lost runs "
                    f"(first: {t.first_problem})"
                )
        return "; ".join(parts) + f" [experiment {self.experiment_id}]"


def run_overhead(target: Target, fp: Fingerprint, timeout: float = ENV_TIMEOUT_S) -> float:
    """Seconds one run costs besides its measuring on ``target``: the agent started as every
    planned run starts it (given the fingerprint's TSC rate), two iterations, its stream read."""
    started = time.monotonic()
    read_stream(list(target.run_agent(startup_args(fp.cpu.tsc_hz), timeout)))
    return time.monotonic() - started


def check_probes(plan: Plan, available: Iterable[ProbeInfo]) -> None:
    """Every probe and parameter of the plan must exist in the agent; UsageError otherwise.

    Checked before the experiment starts, so a typo costs nothing but one line.
    """
    # Workloads (real servers and tools) are checked like the agent's probes.
    infos = {p.name: p for p in [*available, *workload_infos()]}
    unknown = sorted(plan.probes() - set(infos))
    if unknown:
        raise UsageError(
            f"unknown probe {unknown[0]!r}; the agent offers: {', '.join(sorted(infos))}"
        )
    for name, entry in plan.entries.items():
        info = infos[entry["probe"]]
        params = {p.name: p for p in info.params}
        scaled = [r["param"] for r in entry.get("scale_to_memory") or []]
        for key in [*entry["params"], *(p for p in scaled if p != "iterations")]:
            if key not in params:
                known = ", ".join(params) or "none"
                raise UsageError(
                    f"{name}: probe {info.name!r} has no parameter {key!r} (it has: {known})"
                )
            choices = params[key].choices
            value = entry["params"].get(key)
            if choices and value is not None and str(value) not in choices:
                raise UsageError(
                    f"{name}: parameter {key}={value!r} must be one of {', '.join(choices)}"
                )


def detected_labels(fp: Fingerprint) -> dict[str, str]:
    """What the fingerprint says lies under L0, e.g. host_hypervisor=kvm.

    Labels name a configuration, so they must come out the same each time one machine is
    measured. The nesting depth does only where the machine reports it (/proc/sysinfo);
    the estimate from timed CPUIDs does not (on a KVM guest a CPUID costs 6-15k cycles
    from one run to the next, across the estimate's bounds), so it stays in the stored
    fingerprint and is not a label."""
    vendor = (fp.hypervisor.vendor or "").strip().lower() if fp.hypervisor.detected else ""
    out = {"host_hypervisor": vendor.split()[0] if vendor else "none"}
    if fp.nesting.depth is not None and fp.nesting.cpuid_cycles is None:
        out["host_nesting"] = str(fp.nesting.depth)
    return out


def configuration_labels(
    target: Target, fp: Fingerprint, level: str, asked: dict[str, str]
) -> dict[str, str]:
    """A configuration's labels: the target's own, at L0 what lies under it
    (``detected_labels``), then the ones the user asked for, which win."""
    labels = dict(target.labels())
    if level == "L0":
        labels.update(detected_labels(fp))
    labels.update(asked)
    return labels


class Runner:
    """Runs a stored plan's missing steps on its targets; the store is shared under a lock."""

    def __init__(
        self,
        store: Store,
        plan: Plan,
        targets: list[Target],
        *,
        level: str | None = None,
        labels: dict[str, str] | None = None,
        progress: Progress | None = None,
        max_workers: int = 4,
        fingerprints: dict[int, Fingerprint] | None = None,
        observers: Iterable[RunObserver] = (),
        step_source: Callable[..., Iterable[Step]] | None = None,
    ) -> None:
        if len(targets) != len(plan.targets):
            raise VmtaxError(
                f"the plan has {len(plan.targets)} targets but {len(targets)} were given"
            )
        self.store = store
        self.plan = plan
        self.targets = targets
        self.level = level
        self.labels = dict(labels or {})
        self.progress: Progress = progress or NoProgress()
        self.max_workers = max(1, max_workers)
        self._fingerprints = dict(fingerprints or {})
        self.observers = list(observers)
        # Where a target's steps come from: its planned steps, or a callable
        # (slot, config_id, target, planned, store_call) -> steps that may add more as it
        # goes (adaptive sampling, vmtax.sampling).
        self.step_source = step_source
        self._storing = Storing(store, 0)  # execute() makes the experiment's own
        self._stop = threading.Event()
        self._turns: dict[int, Turns] = {}

    def execute(self, experiment_id: int, done: set[int] | None = None) -> Outcome:
        """Run every step not in ``done`` and mark the experiment ok, failed or interrupted.

        KeyboardInterrupt (Ctrl-C, or SIGTERM turned into it by the CLI) kills the agents
        in flight, marks the experiment interrupted and is re-raised.
        """
        done = set(done or ())
        storing = self._storing = Storing(self.store, experiment_id)
        self._turns = self._shared_machine_turns(done)
        lanes = [_TargetLane(self, experiment_id, slot, done) for slot in range(len(self.targets))]
        engine = Engine(self.progress, max_workers=self.max_workers, stop=self._stop)
        with storing.settling():
            errors = engine.run(lanes)
            for lane, exc in zip(lanes, errors, strict=True):
                if exc is not None and lane.outcome.error is None:
                    lane.outcome.error = one_line(str(exc) or type(exc).__name__)
            if any(o.error or o.failed or o.lost for o in (lane.outcome for lane in lanes)):
                storing.status = "failed"
        return Outcome(
            experiment_id=experiment_id,
            status=storing.status,
            targets=[lane.outcome for lane in lanes],
        )

    def _shared_machine_turns(self, done: set[int]) -> dict[int, Turns]:
        """Slot -> the turns it takes with the other targets on its machine (targets alone on
        theirs, like fleet hosts, run freely in parallel)."""
        groups: dict[int, list[int]] = {}
        for slot, target in enumerate(self.targets):
            machine = getattr(target, "machine", None)
            if machine is not None:
                groups.setdefault(id(machine), []).append(slot)
        out: dict[int, Turns] = {}
        for slots in groups.values():
            if len(slots) < 2:
                continue
            planned = [
                s.target for s in self.plan.steps if s.target in slots and s.index not in done
            ]
            turns = Turns(planned, slots)
            out.update(dict.fromkeys(slots, turns))
        return out

    def _configure(
        self, experiment_id: int, slot: int, steps: list[Step], outcome: TargetOutcome
    ) -> tuple[int, Fingerprint, float]:
        """Boot (``prepare``) and fingerprint the target of ``slot``, and store its
        configuration: (its id, the fingerprint, what the agent took to start there)."""
        target = self.targets[slot]
        target.prepare()
        asked = time.monotonic()
        fp = self._fingerprints.get(slot) or fingerprint(target)
        # The agent's own --timeout bounds its measuring, not its start: what the env
        # request took (about 18 s in an L2 under TCG inside TCG, where a 0.15 s run took
        # 31 to 34 s end to end) is added to every run's kill deadline on this target.
        startup_s = 0.0 if slot in self._fingerprints else time.monotonic() - asked
        level = self.level or target.level
        labels = configuration_labels(target, fp, level, self.labels)
        provenance = dict(target.provenance())
        scaling = {
            name: inv.scaling
            for name, inv in ((s.entry, self.plan.invocation(s, fp.memory_bytes)) for s in steps)
            if inv.scaling
        }
        if scaling:
            provenance["memory_scaling"] = scaling
        config_id = self._storing.call(
            self.store.configuration,
            experiment_id=experiment_id,
            level=level,
            labels=labels,
            fingerprint=fp.model_dump(mode="json", by_alias=True),
            target=target.name,
            provenance=provenance,
        )
        outcome.config = " ".join([level, *(f"{k}={v}" for k, v in sorted(labels.items()))])
        return config_id, fp, startup_s

    def _run_step(
        self,
        config_id: int,
        target: Target,
        step: Step,
        fp: Fingerprint,
        outcome: TargetOutcome,
        startup_s: float = 0.0,
    ) -> str:
        inv = self.plan.invocation(step, fp.memory_bytes, tsc_hz=fp.cpu.tsc_hz)
        entry = self.plan.entries[step.entry]
        lines: list[str] = []
        transport_error: str | None = None
        for observer in self.observers:
            observer.before_run(target, step, inv.args)
        times = RunTimes()
        try:
            # A workload's name runs the workload (servers, tools); a probe goes to the agent.
            for line in run_lines(target, inv.args, inv.timeout + startup_s):
                lines.append(line)
        except AgentTimeout as exc:
            transport_error = exc.message
        except TargetError as exc:
            transport_error = exc.message
            if self._stop.is_set():
                transport_error = "interrupted"
        times.end()
        stream = read_stream(lines)
        header = stream.header.model_dump(mode="json", by_alias=True) if stream.header else None
        common = {
            "configuration_id": config_id,
            "probe": step.entry,
            "plan_index": step.index,
            "run_index": step.run,
            "header": header,
            "times": times,
        }
        if stream.runs:
            run = stream.runs[0]
            run_id = self._storing.add_run(
                **common,
                summary=run.summary.model_dump(mode="json"),
                values=run.values,
                warmup_values=run.warmup_values,
                status="ok",
            )
            outcome.ok += 1
            self._observed(target, step, run_id, "ok")
            return "ok"
        if self._stop.is_set():
            transport_error = "interrupted"
        if transport_error or stream.header is not None and stream.end is None:
            status = "lost"
            reason = transport_error or stream.problem or "stream broke off"
        else:
            status = "failed"
            reason = (stream.end.error if stream.end and stream.end.error else None) or (
                target.last_stderr.strip().splitlines()[-1]
                if target.last_stderr.strip()
                else stream.problem or "the agent produced no run"
            )
        if stream.problem and stream.problem not in reason and status == "lost":
            reason = f"{reason} ({stream.problem})"
        reason = one_line(f"{entry['probe']}: {reason}")
        run_id = self._storing.add_run(
            **common,
            summary=None,
            values=_EMPTY,
            warmup_values=_EMPTY,
            status=status,
            error=reason,
        )
        if status == "lost":
            outcome.lost += 1
        else:
            outcome.failed += 1
        outcome.first_problem = outcome.first_problem or reason
        self._observed(target, step, run_id, status)
        return status

    def _observed(self, target: Target, step: Step, run_id: int, status: str) -> None:
        for observer in self.observers:
            observer.after_run(target, step, run_id, status)


class _TargetLane:
    """A run's lane: one target's share of the plan, in its turns with the other targets on
    its machine, each boot of the plan booted anew, given up after runs lost in a row."""

    def __init__(self, runner: Runner, experiment_id: int, slot: int, done: set[int]) -> None:
        self.runner = runner
        self.experiment_id = experiment_id
        self.slot = slot
        self.target = runner.targets[slot]
        self.name = self.target.name
        planned = runner.plan.steps_for(slot)
        self.steps = [s for s in planned if s.index not in done]
        self.total = len(self.steps)
        self.outcome = TargetOutcome(name=self.name, level=runner.level or self.target.level)
        self.outcome.skipped = len(planned) - len(self.steps)
        self.turns = runner._turns.get(slot)
        self._config: tuple[int, Fingerprint, float] | None = None
        self._boot: int | None = None
        self._lost_in_a_row = 0

    def units(self) -> Iterator[Step]:
        runner, source = self.runner, self.runner.step_source
        if not self.steps and source is None:  # resumed, and this target had finished
            return
        try:
            self._config = config_id, _, _ = runner._configure(
                self.experiment_id, self.slot, self.steps, self.outcome
            )
            todo = (
                self.steps
                if source is None
                else source(self.slot, config_id, self.target, self.steps, runner._storing.call)
            )
            if self.turns:
                self.turns.ready(self.slot)
            for step in todo:
                yield step
                if self._lost_in_a_row >= MAX_CONSECUTIVE_LOST:
                    self.outcome.error = (
                        f"{self._lost_in_a_row} runs in a row were lost; giving up on this "
                        f"target (last: {self.outcome.first_problem})"
                    )
                    return
        except VmtaxError as exc:
            if not runner._stop.is_set():
                self.outcome.error = one_line(exc.message)

    def run_unit(self, step: Step) -> str:
        assert self._config is not None
        config_id, fp, startup_s = self._config
        turns, slot, target = self.turns, self.slot, self.target
        # prepare() booted the first step's boot; a step in another boot boots anew first
        # (in its turn, so no other level runs beside the boot). A resumed experiment
        # starts a new boot for what remains, and the runs' boot ids say so.
        with turns.turn(slot, self.runner._stop) if turns else nullcontext(True) as mine:
            if not mine:
                raise Stopped
            if self._boot is not None and step.boot != self._boot:
                target.reboot()
            self._boot = step.boot
            status = self.runner._run_step(config_id, target, step, fp, self.outcome, startup_s)
        self._lost_in_a_row = self._lost_in_a_row + 1 if status == "lost" else 0
        bad = self.outcome.failed + self.outcome.lost
        return f"{target.name}: {step.entry} run {step.run}" + (
            f" ({bad} failed or lost)" if bad else ""
        )

    def end(self, error: BaseException | None) -> tuple[str, bool]:
        if isinstance(error, VmtaxError) and not self.runner._stop.is_set():
            self.outcome.error = self.outcome.error or one_line(error.message)
        if self.turns:
            self.turns.leave(self.slot)
        with contextlib.suppress(Exception):
            self.target.close()
        return final_line(self.outcome), has_problems(self.outcome)

    def cancel(self) -> None:
        self.target.cancel()


def has_problems(outcome: TargetOutcome) -> bool:
    """Whether a target failed as a whole or had a run failed or lost."""
    return bool(outcome.error or outcome.failed or outcome.lost)


def final_line(outcome: TargetOutcome) -> str:
    """A target's last progress row: done, or what went wrong (each host's row in a fleet)."""
    if outcome.error:
        return f"{outcome.name}: FAILED after {outcome.ok} runs: {outcome.error}"
    bad = [f"{n} {what}" for n, what in ((outcome.failed, "failed"), (outcome.lost, "lost")) if n]
    if bad:
        return (
            f"{outcome.name}: done, {outcome.ok} ok, "
            + ", ".join(bad)
            + (f" (first: {outcome.first_problem})" if outcome.first_problem else "")
        )
    return f"{outcome.name}: done, {outcome.ok} ok"


def one_line(text: str) -> str:
    """``text`` on one line: its runs of white space, newlines too, as one space."""
    return " ".join(str(text).split())

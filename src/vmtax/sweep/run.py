"""The sweep loop: in each round (replicate), boot fresh guests and measure every step once,
in the round's random order (``SweepSpec.order``): run the workload in the step's guests at
once, sample a warm-up and a steady-state window at a fixed interval, and commit the unit
(one step of one replicate).

On the guests axis a round's guests stay up from step to step: a step of n guests drives
the round's first n, and the others idle (an idle TCG guest took 0.25% of one CPU here);
the next round boots new ones. On the other axes the guests change size, so every unit
boots its own.

Each guest runs one closed-loop client: the agent's probe in the guest repeats a transaction
(``events`` events of the probe) back to back, or with ``think_time_s`` between transactions.
A transaction's response time is its wall time in the guest; it is counted in the sample
interval in which its record reached the host. The controller samples the host (CPU
utilisation, each QEMU process's CPU, run-queue wait, RSS, major faults) and the memory cap's
paging counters at the same instants.

The triplet workload (study B's web, app and db guests) has its clients on this machine
instead: each GETs the app's page through the triplet's web guest (``triplet``), and each
guest's steal is read from its /proc/stat by a script in the guest (``gueststeal``).

A unit is committed whole (its samples with it) or not at all; ``--resume`` runs the units
without an ``ok`` row. A guest that cannot boot, or a workload that breaks, stores the step as
``failed`` with a one-line reason and ends the sweep there; the committed steps stay.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vmtax.errors import VmtaxError
from vmtax.execution import Engine, NoProgress, Progress, Stopped, Storing
from vmtax.store.runtimes import RunTimes
from vmtax.sweep import host
from vmtax.sweep.cgroup import MemoryCap, swap_total_kb
from vmtax.sweep.gueststeal import StealRecorder
from vmtax.sweep.spec import StepSize, SweepSpec
from vmtax.targets.base import Target

if TYPE_CHECKING:
    from vmtax.store import Store

#: The guest kernel's clock tick (USER_HZ): /proc/stat counts steal in these.
GUEST_HZ = 100
#: Grace after the window for the agents to stop by their own --timeout.
END_GRACE_S = 30.0
#: How long an interrupted step waits for its clients once their agents are killed.
HALT_S = 5.0
#: The columns of a unit's samples (``sweep_samples``).
SAMPLE_FIELDS = (
    "phase", "t_s", "throughput", "transactions", "resp_mean_s", "resp_p95_s", "host_util",
    "guest_util", "steal", "vcpu_wait", "rss_mb", "major_faults", "memory", "per_guest",
)  # fmt: skip


class SweepError(VmtaxError):
    """A step could not be measured; the steps before it are stored."""


@dataclass
class Transaction:
    t: float  # host monotonic time the record arrived
    guest: int
    events: float  # probe events, or MiB for the memory workload (its block grows per step)
    wall_s: float
    steal_ticks: int | None


@dataclass
class Guest:
    """One guest of a step: its target, size and (for QEMU) its process id."""

    target: Target
    vcpus: int
    memory_mb: int
    pid: int | None = None
    cpus: str | None = None  # --cpus for the agent (L0 processes are placed round-robin)
    #: A script in the guest that reads its /proc/stat steal (see gueststeal), for guests
    #: whose clients run elsewhere; None: the clients' agent runs report it.
    steal_script: str | None = None
    #: What the step's detail says about this guest besides its target's provenance.
    detail: dict[str, Any] = field(default_factory=dict)


#: Starts one guest (a booted target) for a step: (step, guest index, vCPUs, MiB) -> Guest.
GuestFactory = Callable[[StepSize, int, int, int], Guest]


def workload_args(spec: SweepSpec, guest: Guest, seconds: float) -> list[str]:
    """The agent invocation of one client for ``seconds`` (closed loop, no warm-up of its
    own: the sweep's warm-up window is the warm-up)."""
    runs = 1 if spec.think_time_s > 0 else 1_000_000  # the agent's maximum
    args = ["run", spec.workload, "--runs", str(runs), "--iterations", str(spec.events)]
    args += ["--warmup", "0", "--duration", "86400", "--timeout", f"{max(0.5, seconds):.2f}"]
    if spec.workload == "cpu":
        args += ["--param", f"max_prime={spec.max_prime}"]
    elif spec.workload == "threads":
        args += ["--param", f"threads={guest.vcpus}", "--param", "locks=64"]
    else:
        args += ["--param", f"block_kb={memory_block_kb(guest.memory_mb)}", "--param", "oper=write"]
    if guest.cpus:
        args += ["--cpus", guest.cpus]
    return args


def memory_block_kb(memory_mb: int) -> int:
    """The memory workload's block: the largest power of two within 60% of the guest's
    memory above what its kernel and initramfs keep (about 80 MiB)."""
    usable_kb = max(1024, int((memory_mb - 80) * 1024 * 0.6))
    return 1 << (usable_kb.bit_length() - 1)


def work_per_event(spec: SweepSpec, guest: Guest) -> float:
    """What one event counts for in the throughput: 1, or for the memory workload the MiB
    of its block, so that steps with bigger guests (and blocks) stay comparable."""
    return memory_block_kb(guest.memory_mb) / 1024 if spec.workload == "memory" else 1.0


def throughput_unit(spec: SweepSpec) -> str:
    if spec.workload == "triplet":
        return "app.php requests/s"
    return "MiB/s written" if spec.workload == "memory" else f"{spec.workload} events/s"


class Client(threading.Thread):
    """One closed-loop client driving the agent in one guest until ``end``; its transactions
    count for guest ``index``."""

    #: Whether a transaction's steal ticks are the guest's (its agent runs in the guest).
    steal_from_agent = True

    def __init__(
        self, index: int, guest: Guest, spec: SweepSpec, end: float, out: list[Transaction]
    ) -> None:
        super().__init__(name=f"sweep-client-{index}", daemon=True)
        self.index, self.guest, self.spec, self.end, self.out = index, guest, spec, end, out
        self.stop = threading.Event()
        self.error: str | None = None
        self.label = f"guest {index + 1}"

    def invocation(self, seconds: float) -> tuple[Target, list[str], float]:
        """Where the agent runs, its arguments for ``seconds``, and what an event counts."""
        args = workload_args(self.spec, self.guest, seconds)
        return self.guest.target, args, work_per_event(self.spec, self.guest)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                left = self.end - time.monotonic()
                if left < 0.5:
                    return
                target, args, per_event = self.invocation(left)
                got = 0
                for line in target.run_agent(args, left + END_GRACE_S):
                    if '"run_summary"' not in line[:40]:
                        continue
                    got += 1
                    rec = json.loads(line)
                    self.out.append(
                        Transaction(
                            time.monotonic(),
                            self.index,
                            int(rec["n"]) * per_event,
                            float(rec["wall_s"]),
                            rec.get("steal_ticks") if self.steal_from_agent else None,
                        )
                    )
                if not got and self.end - time.monotonic() > 2:
                    why = (target.last_stderr.strip().splitlines() or ["no transaction"])[-1]
                    raise VmtaxError(f"the workload ended without a transaction: {why}")
                if self.spec.think_time_s > 0:
                    self.stop.wait(self.spec.think_time_s)
        except Exception as exc:  # noqa: BLE001 - a thread's error is the step's, in one line
            if self.stop.is_set():
                return  # stopped (Ctrl-C): the guest it read from went away on purpose
            self.error = f"{self.label}: {' '.join(str(exc).split())}"


@dataclass
class StepOutcome:
    index: int
    ratio: float
    status: str
    error: str | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    replicate: int = 0


class SweepRunner:
    """Runs a sweep's missing units on the execution engine (``vmtax.execution.Engine``): the
    sweep is one lane of it (one progress row, ``sweep``), whose units are the steps of each
    replicate in the spec's order; each is stored through ``Storing`` as it ends."""

    def __init__(
        self,
        store: Store,
        spec: SweepSpec,
        factory: GuestFactory,
        *,
        level: str = "L1",
        progress: Progress | None = None,
    ) -> None:
        self.store = store
        self.spec = spec
        self.factory = factory
        self.level = level
        self.progress: Progress = progress or NoProgress()
        self.guests: list[Guest] = []  # the round's guests
        self.active: list[Guest] = []  # the step's: the first of them
        self.cap: MemoryCap | None = None
        # The lane (vmtax.execution.Lane) that execute() hands the engine.
        self.name = PROGRESS_ROW
        self.total = 0
        self._stop = threading.Event()
        self._storing: Storing | None = None
        self._todo: list[tuple[int, int, int]] = []  # (position, replicate, step index)
        self._sizes: list[StepSize] = []
        self._experiment_id = 0
        self._units = 0
        self._stored: list[StepOutcome] = []
        self._clients_now: list[Client] = []
        self._failure: tuple[str, str] | None = None  # (the error, its unit's line)

    # -- guests ----------------------------------------------------------------------------
    def _stop_guests(self, keep: int = 0) -> None:
        while len(self.guests) > keep:
            guest = self.guests.pop()
            with contextlib.suppress(Exception):
                guest.target.close()

    def _start_guests(self, size: StepSize) -> None:
        """Guests for ``size``: the round's guests that have its sizes stay (the guests
        axis), more boot; guests of other sizes are stopped first."""
        same = all(
            i >= size.guests or (g.vcpus == size.vcpus[i] and g.memory_mb == size.memory_mb[i])
            for i, g in enumerate(self.guests)
        )
        if not same:
            self._stop_guests()
        for i in range(len(self.guests), size.guests):
            try:
                if self.cap is not None:
                    with self.cap.inside():
                        guest = self.factory(size, i, size.vcpus[i], size.memory_mb[i])
                else:
                    guest = self.factory(size, i, size.vcpus[i], size.memory_mb[i])
            except VmtaxError as exc:
                raise SweepError(
                    f"step {size.index + 1} ({size.ratio:g}:1): guest {i + 1} of {size.guests} "
                    f"failed to boot: {' '.join(exc.message.split())}"
                ) from None
            self.guests.append(guest)
        self.active = self.guests[: size.guests]

    # -- one step --------------------------------------------------------------------------
    def run_step(self, size: StepSize, replicate: int = 0) -> StepOutcome:
        spec, timing = self.spec, self.spec.timing
        outcome = StepOutcome(size.index, size.ratio, "ok", replicate=replicate)
        self._start_guests(size)
        n_warm = math.ceil(timing.warmup_s / timing.interval_s) if timing.warmup_s else 0
        n_total = n_warm + timing.samples
        txns: list[Transaction] = []
        t0 = time.monotonic()
        # The clients run a little past the last sample, so that none stops inside it.
        end = t0 + n_total * timing.interval_s + 0.5
        clients = self._clients_now = self._clients(end, txns)
        recorders = self._steal_recorders(n_total)
        for c in clients:
            c.start()
        driven = {c.index for c in clients}
        pids = [g.pid for g in self.active if g.pid is not None]
        ncpus = spec.host_cpus
        prev = host.snapshot(pids)
        prev_cg = self.cap.stat() if self.cap else None
        window: list[Transaction] = []
        try:
            for seq in range(n_total):
                until = t0 + (seq + 1) * timing.interval_s
                if self._stop.wait(max(0.0, until - time.monotonic())):
                    raise Stopped
                snap = host.snapshot(pids)
                cg = self.cap.stat() if self.cap else None
                got = [x for x in txns if prev.t < x.t <= snap.t]
                phase = "warmup" if seq < n_warm else "window"
                if phase == "window":
                    window += got
                outcome.samples.append(
                    self._sample(phase, t0, prev, snap, got, ncpus, prev_cg, cg, driven)
                )
                prev, prev_cg = snap, cg
                broken = [c.error for c in clients if c.error]
                if broken:
                    outcome.status, outcome.error = "failed", broken[0]
                    break
        except BaseException:
            # Ctrl-C or SIGTERM (the engine's stop): the clients stop, their guests' agents
            # are killed so that no read waits for them, and no client outlives the step.
            self._halt(clients)
            raise
        finally:
            for c in clients:
                c.stop.set()
        for c in clients:
            c.join(timeout=END_GRACE_S + 15)
        self._guest_steal(outcome.samples, recorders, t0)
        broken = [c.error for c in clients if c.error]
        if broken and outcome.status == "ok":
            outcome.status, outcome.error = "failed", broken[0]
        resp = np.asarray([x.wall_s for x in window])
        outcome.detail = {
            "step": size.index,
            "replicate": replicate,
            "asked_ratio": size.asked,
            "vcpus_per_guest": list(size.vcpus),
            "memory_mb_per_guest": list(size.memory_mb),
            "window_transactions": int(resp.size),
            "resp_p95_s": float(np.percentile(resp, 95)) if resp.size else None,
            "resp_mean_s": float(resp.mean()) if resp.size else None,
            "level": self.level,
            "guests": [{**g.target.provenance(), **g.detail} for g in self.active],
        }
        return outcome

    def _halt(self, clients: list[Client]) -> None:
        """Stop the step's clients at once: set their stop events, cancel every target they
        drive (so no agent call waits and none starts), and wait briefly for them to end."""
        for c in clients:
            c.stop.set()
        targets = [g.target for g in self.active]
        targets += [t for c in clients if (t := getattr(c, "local", None)) is not None]
        for target in targets:
            with contextlib.suppress(Exception):
                target.cancel()
        for c in clients:
            c.join(timeout=HALT_S)

    def _clients(self, end: float, out: list[Transaction]) -> list[Client]:
        """One client per guest, or the factory's own (the triplet's, on this machine)."""
        make = getattr(self.factory, "clients", None)
        if make is not None:
            return list(make(self.active, end, out))
        return [Client(i, g, self.spec, end, out) for i, g in enumerate(self.active)]

    def _steal_recorders(self, n_samples: int) -> dict[int, StealRecorder]:
        """Steal readers for the guests whose clients cannot report it, started now: one
        reading at the start and one at each sample."""
        out = {}
        for i, g in enumerate(self.active):
            if g.steal_script:
                rec = StealRecorder(g.target, g.steal_script, self.spec.timing.interval_s,
                                    n_samples + 1)  # fmt: skip
                rec.start()
                out[i] = rec
        return out

    def _guest_steal(
        self, samples: list[dict[str, Any]], recorders: dict[int, StealRecorder], t0: float
    ) -> None:
        """Fill in the steal of guests read by a recorder, per sample and guest."""
        if not recorders:
            return
        interval = self.spec.timing.interval_s
        for rec in recorders.values():
            rec.finish(interval * 3 + 60)
        ends = [t0] + [t0 + s["t_s"] for s in samples]
        for sample, a, b in zip(samples, ends, ends[1:], strict=False):
            for row in sample["per_guest"]:
                reader = recorders.get(row["guest"] - 1)
                if reader is not None:
                    row["steal"] = reader.steal(a, b)
            steals = [r["steal"] for r in sample["per_guest"] if r.get("steal") is not None]
            sample["steal"] = float(np.mean(steals)) if steals else None

    def _sample(
        self,
        phase: str,
        t0: float,
        a: host.Snapshot,
        b: host.Snapshot,
        got: list[Transaction],
        ncpus: int,
        cg_a: dict[str, int] | None,
        cg_b: dict[str, int] | None,
        driven: set[int],
    ) -> dict[str, Any]:
        dt = b.t - a.t
        resp = np.asarray([x.wall_s for x in got])
        per_guest = []
        for i, g in enumerate(self.active):
            mine = [x for x in got if x.guest == i]
            row: dict[str, Any] = {
                "guest": i + 1,
                # A guest no client drives (a triplet's db and app) has no throughput of its own.
                "throughput": sum(x.events for x in mine) / dt if dt > 0 and i in driven else None,
                "steal": _steal(mine),
            }
            if g.pid is not None:
                row.update(host.guest_delta(a, b, g.pid, g.vcpus, ncpus))
            per_guest.append(row)

        def total(key: str) -> float | None:
            vals = [r[key] for r in per_guest if r.get(key) is not None]
            return float(sum(vals)) if vals else None

        waits = [r["wait"] for r in per_guest if r.get("wait") is not None]
        steals = [r["steal"] for r in per_guest if r.get("steal") is not None]
        memory = None
        if self.cap is not None and cg_a is not None and cg_b is not None:
            memory = self.cap.paging(cg_a, cg_b, dt)
        return {
            "phase": phase,
            "t_s": b.t - t0,
            "throughput": sum(x.events for x in got) / dt if dt > 0 else None,
            "transactions": len(got),
            "resp_mean_s": float(resp.mean()) if resp.size else None,
            "resp_p95_s": float(np.percentile(resp, 95)) if resp.size else None,
            "host_util": host.host_util(a, b),
            "guest_util": total("cpu"),
            "steal": float(np.mean(steals)) if steals else None,
            "vcpu_wait": float(np.mean(waits)) if waits else None,
            "rss_mb": total("rss_mb"),
            "major_faults": total("major_faults"),
            "memory": memory,
            "per_guest": per_guest,
        }

    # -- the whole sweep: one lane of the engine -----------------------------------------------
    def execute(self, experiment_id: int) -> list[StepOutcome]:
        """Run every unit not yet committed, round by round in the spec's order; mark the
        experiment ok, failed or interrupted. A failed unit is stored, and ends the sweep
        with SweepError."""
        storing = self._storing = Storing(self.store, experiment_id)
        done = self.store.sweeps.committed_steps(experiment_id)
        order = list(enumerate(self.spec.order()))
        self._todo = [(p, r, i) for p, (r, i) in order if self.spec.unit(r, i) not in done]
        self._units, self.total = len(order), len(self._todo)
        self._sizes = self.spec.steps()
        self._stored, self._failure = [], None
        self._experiment_id = experiment_id
        with storing.settling(self._cleanup):
            # The cap holds guests; L0's agent processes are not guests and run uncapped.
            if self.spec.cap_mb and self.level != "L0":
                self.cap = MemoryCap(f"vmtax-sweep-{experiment_id}", self.spec.cap_mb)
            [error] = Engine(self.progress, max_workers=1, stop=self._stop).run([self])
            if error is not None:
                raise error
        return self._stored

    def units(self) -> Iterator[tuple[int, int, int]]:
        """The units to run: a new round boots its own guests; a failed unit ends them."""
        current = None
        for unit in self._todo:
            _, replicate, _ = unit
            if replicate != current:
                self._stop_guests()
                current = replicate
            yield unit
            if self._failure is not None:
                raise SweepError(f"{self._failure[0]} [experiment {self._experiment_id}]")

    def run_unit(self, unit: tuple[int, int, int]) -> str:
        """Measure one unit and store it whole (a failed one too); its progress line."""
        position, replicate, index = unit
        assert self._storing is not None
        size = self._sizes[index]
        times = RunTimes()
        try:
            outcome = self.run_step(size, replicate)
        except SweepError as exc:
            outcome = StepOutcome(
                size.index, size.ratio, "failed", exc.message, replicate=replicate
            )
            outcome.detail = {"step": size.index, "replicate": replicate}
        if self._stop.is_set():
            raise Stopped  # the guests and agents were stopped on purpose: nothing to store
        outcome.detail["order"] = position
        rows = [{k: x.get(k) for k in SAMPLE_FIELDS} for x in outcome.samples]
        self._storing.add_unit(self._row(size, replicate, outcome), rows, times)
        self._stored.append(outcome)
        line = unit_line(outcome, len(self._stored), self._units, self.spec)
        if outcome.status != "ok":
            self._storing.status = "failed"
            self._failure = (str(outcome.error), line)
        return line

    def end(self, error: BaseException | None) -> tuple[str, bool]:
        if self._failure is not None:
            return self._failure[1], True
        if error is not None:
            return " ".join(str(error).split()), True
        return f"sweep: done, {len(self._stored)} units", False

    def cancel(self) -> None:
        """Ctrl-C: the step's clients stop and every guest's agent is killed, a guest still
        booting too (the factory's ``cancel``)."""
        self._halt(self._clients_now)
        cancel = getattr(self.factory, "cancel", None)
        if cancel is not None:
            cancel()

    def _cleanup(self) -> None:
        self._stop_guests()
        close = getattr(self.factory, "close", None)
        if close is not None:
            close()
        if self.cap is not None:
            self.cap.close()

    def _row(self, size: StepSize, replicate: int, outcome: StepOutcome) -> dict[str, Any]:
        """The unit's row (``sweep_steps``): ``step_index`` is the unit's index."""
        detail = dict(outcome.detail)
        file_backed = bool(getattr(self.factory, "file_backed", False))
        if self.cap is not None:
            detail["memory_cap"] = {
                "cgroup_version": self.cap.version,
                "limit_mb": self.cap.limit_mb,
                "swap_mb": swap_total_kb() // 1024,
                "guest_ram": "file-backed (share=on)" if file_backed else "anonymous",
            }
        return {
            "step_index": self.spec.unit(replicate, size.index),
            "ratio": float(size.ratio),
            "axis": self.spec.axis,
            "status": outcome.status,
            "guests": size.guests,
            "vcpus": sum(size.vcpus),
            "guest_memory_mb": sum(size.memory_mb),
            "host_cpus": self.spec.host_cpus,
            "host_memory_mb": size.cap_mb,
            "detail": detail,
            "error": outcome.error,
        }


#: The sweep's one row in a progress display.
PROGRESS_ROW = "sweep"


def unit_line(o: StepOutcome, done: int, units: int, spec: SweepSpec) -> str:
    """A unit's progress line: where it stands in the sweep and its window's figures."""
    window = [s for s in o.samples if s["phase"] == "window"]
    tput = [s["throughput"] for s in window if s["throughput"] is not None]
    util = [s["host_util"] for s in window if s["host_util"] is not None]
    throughput = sum(tput) / len(tput) if tput else math.nan
    p95 = o.detail.get("resp_p95_s") or math.nan
    cpu = 100 * sum(util) / len(util) if util else math.nan
    return (
        f"[{done}/{units}] replicate {o.replicate + 1}/{spec.replicates} "
        f"step {o.index + 1}/{len(spec.ratios)} {o.ratio:g}:1 {o.status}: {throughput:,.0f} "
        f"{throughput_unit(spec)}, p95 {p95:.3g} s, host CPU {cpu:.0f}%"
    )


def _steal(mine: list[Transaction]) -> float | None:
    """Guest-reported steal: its /proc/stat steal ticks over the transactions' wall time."""
    known = [x for x in mine if x.steal_ticks is not None]
    wall = sum(x.wall_s for x in known)
    if not known or wall <= 0:
        return None
    return sum(int(x.steal_ticks or 0) for x in known) / GUEST_HZ / wall


def spec_for_resume(plan: dict[str, Any]) -> SweepSpec:
    if "sweep" not in plan:
        raise VmtaxError("that experiment is not a sweep (run `vmtax sweep` to start one)")
    return replace(SweepSpec.from_plan(plan["sweep"]))

"""An in-process target for testing the runner, the engine, resume, interrupts, adaptive
sampling and boots without an agent process or a guest.

``FakeTarget`` keeps the ``Target`` contract (``vmtax.targets.base``): it answers the agent's
requests (``env``, ``list``, ``run``, ``noise``) with the records the real agent streams
(``vmtax.contract``, built from its models, the fingerprint and probe list from the shared
vectors), it boots (``prepare``, ``reboot``) with a new boot id each time when it stands in
for a guest, and it can be cancelled. What a run measures and how long it takes come from a
seeded ``TimeModel``, on a ``VirtualClock`` that only the fake advances: a run "takes" the
time the model gives it, as the commands of hyperfine's mock executor take the time they are
told, so a test of hundreds of runs ends in a fraction of a second and never sleeps.

A ``Script`` tells it what goes wrong, by the number of the request (the 1st, 2nd ... run
request on this target) or of the boot:

- ``fail``: the agent refuses the run (an ``end`` record with status error and a message);
- ``lose``: the stream breaks off after the run's first samples (the agent died);
- ``hang``: the agent prints its header and nothing more until the controller's deadline: the
  clock is moved on by the timeout the runner gave and ``AgentTimeout`` is raised, as a real
  target raises it once the deadline has passed;
- ``ctrl_c``: while this run is in flight, SIGINT reaches the main thread, as a terminal's
  Ctrl-C does; the run stays in flight until the target is cancelled (the agent killed);
- ``fail_boots``: that boot (1 for the first) never gets its agent ready: ``TargetError``.

Cancelled (Ctrl-C), a guest refuses every later request for good, as ``QemuTarget`` does;
a machine (L0) still answers one, as ``LocalTarget`` starts a new agent then. Either way the
request is kept in ``after_cancel``: a runner must make none.

Everything the fake did is in ``runs`` (one ``FakeRun`` per run request), ``boot_ids``,
``requests`` and ``after_cancel``, so a test can put the store beside what "happened" on
the target.
"""

from __future__ import annotations

import json
import signal
import threading
import uuid
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vmtax.contract import SCHEMA, End, Fingerprint, Header, RunSummary, Samples
from vmtax.targets.base import AgentTimeout, Target, TargetError
from vmtax.targets.spec import TargetSpec, parse_spec

VECTORS = Path(__file__).parent / "vectors"
_ENV = json.loads((VECTORS / "env.json").read_text())
_PROBES = json.loads((VECTORS / "probe_list.json").read_text())
#: A real agent's probes beside the vectors' two, so plans can name a third.
_SYSCALL = {
    "name": "syscall",
    "summary": "getppid round trip",
    "mechanism": "system call",
    "unit": "ns",
    "better": "lower",
    "throughput_unit": None,
    "params": [],
    "needs_root": False,
    "arches": ["x86_64"],
}
_NS = uuid.UUID("6b1f3c1e-9d0a-4c38-8f57-0f5c2d7a9e11")
#: How long (real seconds) a run in flight at Ctrl-C waits to be killed before the fake
#: gives up: only reached when the runner never cancels its targets, which is a failure.
CANCEL_WAIT_S = 20.0


class VirtualClock:
    """Seconds that pass only when the fake says so (runs, boots, timeouts, noise windows).
    Shared by targets that run on one (virtual) machine; safe across the runner's threads."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += float(seconds)
            return self._now


@dataclass(frozen=True)
class TimeModel:
    """What a run measures and how long things take, all drawn from ``seed``.

    A run's mean is ``base[probe] * exp(boot effect + run noise)``: each boot draws its effect
    per probe from N(0, boot_sd), each run its noise from N(0, run_sd) (a stream per probe, in
    the order of the runs); its samples scatter around that mean by sample_sd, and its
    summary is computed from them. A run takes ``startup_s`` plus its ``--duration`` (or
    ``run_s``) on the clock, a boot ``boot_s``.
    """

    seed: int = 0
    base: Mapping[str, float] = field(
        default_factory=lambda: {"cpuid": 1000.0, "cpu": 5000.0, "syscall": 300.0}
    )
    boot_sd: float = 0.05
    run_sd: float = 0.01
    sample_sd: float = 0.02
    samples: int = 6
    boot_s: float = 20.0
    startup_s: float = 0.02
    run_s: float = 0.5


@dataclass(frozen=True)
class Script:
    """What goes wrong on a target: run request number -> ``fail``, ``lose``, ``hang`` or
    ``ctrl_c``; and the boots (1 for the first) that fail."""

    runs: Mapping[int, str] = field(default_factory=dict)
    fail_boots: Collection[int] = ()

    def __post_init__(self) -> None:
        bad = {a for a in self.runs.values() if a not in ("fail", "lose", "hang", "ctrl_c")}
        if bad:
            raise ValueError(f"unknown scripted actions: {sorted(bad)}")


@dataclass
class FakeRun:
    """One run request as the fake answered it."""

    number: int  # 1 for this target's first run request
    probe: str
    args: list[str]
    timeout: float  # the deadline the runner gave (seconds)
    boot: int  # 1 for the first boot
    boot_id: str
    action: str  # "ok" or the scripted one
    started: float  # on the virtual clock
    ended: float
    mean: float | None = None  # the run's mean as its summary says (None: no summary)
    values: list[float] = field(default_factory=list)


class FakeTarget(Target):
    """A target answered in this process from a ``TimeModel`` on a ``VirtualClock``.

    ``guest``: it stands in for a guest vmtax boots (each ``prepare`` after a close, and each
    ``reboot``, is a new boot with a new boot id and a new boot effect, and takes ``boot_s``);
    otherwise it is a machine with one boot, whose boot id stays the same for every fake of
    that name. Give the fakes of a resumed experiment the first ones' clock: time goes on,
    and their guests' boots are new ones.
    ``machine``: targets given the same object take turns as levels on one machine do.
    """

    def __init__(
        self,
        name: str = "fake",
        level: str = "L0",
        *,
        guest: bool | None = None,
        model: TimeModel | None = None,
        clock: VirtualClock | None = None,
        script: Script | None = None,
        labels: Mapping[str, str] | None = None,
        machine: object | None = None,
    ) -> None:
        self.name = name
        self.level = level
        self.guest = level != "L0" if guest is None else guest
        self.model = model or TimeModel()
        self.clock = clock or VirtualClock()
        self.script = script or Script()
        self._labels = dict(labels or {})
        if machine is not None:
            self.machine = machine
        self.last_stderr = ""
        #: What happened, in order.
        self.runs: list[FakeRun] = []
        self.boot_ids: list[str] = []
        self.requests: list[list[str]] = []
        #: Requests made after ``cancel()``: a runner must make none (a guest refuses them,
        #: this machine would run them, as ``LocalTarget`` does).
        self.after_cancel: list[list[str]] = []
        self.closed = 0
        self._lock = threading.Lock()
        self._booted = False
        self._boot_attempts = 0
        self._cancelled = threading.Event()
        self._run_noise: dict[str, np.random.Generator] = {}

    # -- the contract ------------------------------------------------------------------------

    def prepare(self) -> None:
        self._refuse_if_cancelled()
        with self._lock:
            if self._booted:
                return
            self._boot_attempts += 1
            attempt = self._boot_attempts
        if self.guest:
            self.clock.advance(self.model.boot_s)
        if attempt in self.script.fail_boots:
            raise TargetError(
                f"{self.name}: agent not ready within {self.model.boot_s:g} s of boot "
                f"(boot {attempt} fails, as scripted)"
            )
        if self.guest:
            # Named by the guest and the moment it came up: a later boot on the same clock (a
            # reboot, or the fakes of a resume given the same clock) is a new one.
            boot_id = str(uuid.uuid5(_NS, f"guest:{self.model.seed}:{self.name}:{self.clock()!r}"))
        else:
            boot_id = str(uuid.uuid5(_NS, f"machine:{self.name}"))
        with self._lock:
            self.boot_ids.append(boot_id)
            self._booted = True

    def reboot(self) -> None:
        if not self.guest:
            return  # this machine, an SSH host: one boot
        self.close()
        self.prepare()

    def close(self) -> None:
        with self._lock:
            self.closed += 1
            if self.guest:
                self._booted = False

    def cancel(self) -> None:
        self._cancelled.set()
        self.close()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    def provenance(self) -> dict[str, Any]:
        return {"kind": "fake", "seed": self.model.seed}

    def run_agent(self, args: list[str], timeout: float) -> Iterator[str]:
        with self._lock:
            self.requests.append(list(args))
            if self._cancelled.is_set():
                self.after_cancel.append(list(args))
        self._refuse_if_cancelled()
        self.prepare()  # a guest that is not up boots first, as QemuTarget does
        self.last_stderr = ""
        command = args[0] if args else ""
        if command == "env":
            yield json.dumps(self.fingerprint()) + "\n"
        elif command == "list":
            yield json.dumps([*_PROBES, _SYSCALL]) + "\n"
        elif command == "noise":
            yield json.dumps(self._noise(_option(args, "--window", 0.05))) + "\n"
        elif command == "run" and len(args) > 1:
            yield from self._run(args, timeout)
        else:
            self.last_stderr = f"vmtax-probe: error: unrecognized subcommand {command!r}"

    # -- answers -----------------------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        """The agent's ``env`` answer: the vectors' fingerprint, named after this target."""
        return _ENV | {"hostname": self.name}

    def boot_id(self) -> str:
        return self.boot_ids[-1]

    def _noise(self, window: float) -> dict[str, Any]:
        self.clock.advance(window)
        return {
            "type": "noise", "chunks": 1000, "clock": "tsc", "logical_cpus": 2,
            "other_cpu_pct": 0.0, "procs_blocked": 0, "procs_running": 1, "steal_ticks": 0,
            "ticks_per_add": 1.0, "ticks_per_add_p10": 1.0, "ticks_per_add_p90": 1.0,
            "tsc_hz": _ENV["cpu"]["tsc_hz"], "window_s": window,
        }  # fmt: skip

    def _run(self, args: list[str], timeout: float) -> Iterator[str]:
        probe = args[1]
        info = {p["name"]: p for p in [*_PROBES, _SYSCALL]}.get(probe)
        if info is None:
            self.last_stderr = f"vmtax-probe: error: unknown probe {probe!r}"
            return
        with self._lock:
            number = len(self.runs) + 1
            boot = len(self.boot_ids)
        action = self.script.runs.get(number, "ok")
        duration = _option(args, "--duration", None)
        took = self.model.startup_s + (duration if duration is not None else self.model.run_s)
        started = self.clock()
        record = FakeRun(
            number=number, probe=probe, args=list(args), timeout=timeout, boot=boot,
            boot_id=self.boot_id(), action=action, started=started, ended=started,
        )  # fmt: skip
        with self._lock:
            self.runs.append(record)
        header = self._header(info, args)
        yield header.model_dump_json(by_alias=True) + "\n"
        if action == "hang":
            # Nothing more until the controller's deadline, where a real target kills it.
            record.ended = self.clock.advance(timeout)
            raise AgentTimeout(
                f"agent `{' '.join(args[:2])}` did not finish within {timeout:g} s and was killed"
            )
        if action == "fail":
            record.ended = self.clock.advance(self.model.startup_s)
            self.last_stderr = f"vmtax-probe: error: {probe}: refused (scripted failure)"
            end = End(type="end", status="error", error="refused (scripted)", runs_completed=0)
            yield end.model_dump_json() + "\n"
            return
        mean = self._run_mean(probe, record.boot_id)
        rng = np.random.default_rng(_seed(self.model.seed, self.name, probe, "samples", number))
        values = list(mean * np.exp(rng.normal(0.0, self.model.sample_sd, self.model.samples)))
        warmup = int(_option(args, "--warmup", 0) or 0)
        if warmup:
            yield _samples(0, info["unit"], [v * 1.05 for v in values[:warmup]], warmup=True)
        half = len(values) // 2
        yield _samples(0, info["unit"], values[:half])
        if action == "lose":
            record.ended = self.clock.advance(took / 2)
            self.last_stderr = "vmtax-probe: killed by signal 9"
            return
        if action == "ctrl_c":
            # Ctrl-C reaches the main thread while this run measures; the run ends only when
            # the runner cancels its targets (a real agent is killed then).
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            if not self._cancelled.wait(CANCEL_WAIT_S):
                raise AgentTimeout(f"{self.name}: nobody cancelled the run in flight at Ctrl-C")
            record.ended = self.clock()
            raise TargetError(f"{self.name}: the agent was killed (cancelled)")
        yield _samples(0, info["unit"], values[half:])
        record.ended = self.clock.advance(took)
        record.values = values
        arr = np.asarray(values)
        summary = RunSummary(
            type="run_summary", run=0, n=arr.size, mean=float(arr.mean()),
            median=float(np.median(arr)), stddev=float(arr.std(ddof=1)), min=float(arr.min()),
            max=float(arr.max()), p95=float(np.percentile(arr, 95)),
            p99=float(np.percentile(arr, 99)), wall_s=took, cpus=[0],
            stopped_by="duration" if duration is not None else "iterations",
        )  # fmt: skip
        record.mean = summary.mean
        yield summary.model_dump_json() + "\n"
        yield End(type="end", status="ok", runs_completed=1).model_dump_json() + "\n"

    def _header(self, info: dict[str, Any], args: list[str]) -> Header:
        params: dict[str, Any] = {p["name"]: p["default"] for p in info["params"]}
        for i, arg in enumerate(args):
            if arg == "--param" and i + 1 < len(args):
                key, _, value = args[i + 1].partition("=")
                params[key] = int(value) if value.lstrip("-").isdigit() else value
        return Header.model_validate(
            {
                "type": "header", "schema": SCHEMA, "agent_version": _ENV["agent_version"],
                "probe": info["name"], "unit": info["unit"], "better": info["better"],
                "throughput_unit": info["throughput_unit"], "mechanism": info["mechanism"],
                "params": params, "runs": 1,
                "iterations": int(_option(args, "--iterations", self.model.samples) or 0),
                "duration_s": _option(args, "--duration", None),
                "warmup": int(_option(args, "--warmup", 0) or 0),
                "timeout_s": _option(args, "--timeout", None), "cpus": None,
                "started_at": "2026-11-21T12:00:00Z", "boot_id": self.boot_id(),
                "env": Fingerprint.model_validate(self.fingerprint()),
            }
        )  # fmt: skip

    def _run_mean(self, probe: str, boot_id: str) -> float:
        m = self.model
        effect = np.random.default_rng(_seed(m.seed, self.name, probe, "boot", boot_id)).normal(
            0.0, m.boot_sd
        )
        with self._lock:
            noise = self._run_noise.setdefault(
                probe, np.random.default_rng(_seed(m.seed, self.name, probe, "runs"))
            )
            draw = noise.normal(0.0, m.run_sd)
        return float(m.base.get(probe, 100.0) * np.exp(effect + draw))

    def _refuse_if_cancelled(self) -> None:
        # Only a guest refuses for good (QemuTarget); a machine's cancel is its close, and a
        # later request starts a new agent there (LocalTarget).
        if self.guest and self._cancelled.is_set():
            raise TargetError(f"{self.name}: stopped (interrupted)")


def fake_targets(
    specs: Sequence[TargetSpec | dict[str, Any]],
    *,
    clock: VirtualClock | None = None,
    model: TimeModel | None = None,
    scripts: Mapping[int, Script] | None = None,
) -> list[FakeTarget]:
    """A fake for each spec of a plan, as ``plan.targets.make_targets`` builds real ones:
    a level's guest boots (``guest``), levels on this machine take turns (one ``machine``).
    ``scripts``: slot -> what goes wrong there."""
    clock = clock or VirtualClock()
    machine = object()
    out = []
    for slot, raw in enumerate(specs):
        spec = parse_spec(raw)
        level = getattr(spec, "level", "L0")
        here = spec.on_this_machine
        out.append(
            FakeTarget(
                name=f"fake-{level}" if spec.kind == "level" else f"fake-{spec.kind}-{slot}",
                level=level,
                guest=level != "L0",
                model=model,
                clock=clock,
                script=(scripts or {}).get(slot),
                labels={"set": spec.set} if getattr(spec, "set", None) else None,
                machine=machine if here and len(specs) > 1 else None,
            )
        )
    return out


def fake_factory(
    made: list[list[FakeTarget]], **kwargs: Any
) -> Callable[..., tuple[list[Target], int | None]]:
    """A stand-in for ``make_targets`` (monkeypatched where a use case calls it): each call
    builds fakes for the specs (``fake_targets(specs, **kwargs)``) and appends them to
    ``made``, so the test can see what the resumed controller's targets did."""

    def make_targets(
        specs: Sequence[TargetSpec | dict[str, Any]], **_: Any
    ) -> tuple[list[Target], int | None]:
        built = fake_targets(specs, **kwargs)
        made.append(built)
        return list(built), None

    return make_targets


def _samples(run: int, unit: str, values: list[float], *, warmup: bool = False) -> str:
    rec = Samples(type="samples", run=run, unit=unit, warmup=warmup, values=values)
    return rec.model_dump_json() + "\n"


def _option(args: list[str], name: str, default: Any) -> Any:
    if name in args and args.index(name) + 1 < len(args):
        return float(args[args.index(name) + 1])
    return default


def _seed(*parts: object) -> int:
    """A stable seed from parts (Python's own hash of a string changes per process)."""
    return zlib.crc32(":".join(str(p) for p in parts).encode())

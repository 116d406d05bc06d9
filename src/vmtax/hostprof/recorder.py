"""Record an exit profile around every probe run (``vmtax run --exits``).

A ``Recorder`` is a run observer (``vmtax.runner.RunObserver``). Before a run it asks the
agent on each host side of the target (``target.host_sides()``: the levels whose KVM runs the
measured guest) to ``exits start``; after the run is stored it asks for ``exits stop`` and
stores the profile against the run id. Nothing here can lose a run: a side that cannot
record (no tracefs, not root, the guest gone) gets a profile marked incomplete with the
reason, and a one-line note on stderr the first time.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vmtax.contract import Fingerprint, probe_startup_args, startup_args
from vmtax.errors import VmtaxError
from vmtax.hostprof.store import save_profile
from vmtax.targets.local import LocalTarget
from vmtax.workloads import run_lines

if TYPE_CHECKING:
    from vmtax.plan.plan import Step
    from vmtax.store import Store
    from vmtax.targets.base import Target

#: Seconds an ``exits start`` or ``exits stop`` request may take (TCG levels are slow).
REQUEST_TIMEOUT_S = 120.0
#: Tries at measuring one start-up: each is short, and a table without it is off by the
#: start-up's exits per run.
CALIBRATION_TRIES = 3


def host_sides(target: Target) -> dict[str, Target]:
    """The host sides of ``target`` (level -> Target), or {} when it offers none."""
    sides = getattr(target, "host_sides", None)
    if sides is None:
        return {}
    try:
        return dict(sides())
    except VmtaxError:
        return {}


def _qemu_arg(target: Target, side: Target) -> list[str]:
    """Which qemu-system process a side records: this machine records the target's own QEMU
    (other guests may run beside it); inside a vmtax guest it is the only one there."""
    if isinstance(side, LocalTarget):
        proc = getattr(getattr(target, "guest", None), "proc", None)
        return ["--qemu", str(proc.pid)] if proc is not None else ["--qemu", "auto"]
    return ["--qemu", "auto"]


def _tsc_hz(target: Target) -> float | None:
    """The target's TSC rate from its fingerprint, as the runner passes it to every run."""
    try:
        text = "".join(target.run_agent(["env", "--format", "json"], REQUEST_TIMEOUT_S))
        return Fingerprint.model_validate_json(text).cpu.tsc_hz
    except Exception:  # noqa: BLE001 - without it the start-up is recorded as a full one
        return None


def _request(side: Target, args: list[str]) -> tuple[dict[str, Any] | None, str]:
    """Run ``vmtax-probe ARGS`` on ``side``: (its JSON object, "") or (None, the error)."""
    try:
        text = "".join(side.run_agent(args, REQUEST_TIMEOUT_S)).strip()
    except VmtaxError as exc:
        return None, exc.message
    for line in reversed(text.splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj, ""
    err = (side.last_stderr or "").strip().splitlines()
    msg = err[-1] if err else "no output"
    return None, msg.removeprefix("vmtax-probe: error: ")


def _start(target: Target, side: Target) -> str:
    """``exits start`` for ``target``'s guest on ``side``: "" or the error. Only inside a
    vmtax guest may the agent mount tracefs itself."""
    mount = [] if type(side).__name__ in ("LocalTarget", "SshTarget") else ["--mount"]
    _, err = _request(side, ["exits", "start", *_qemu_arg(target, side), *mount])
    return err


class Recorder:
    """Brackets each run with ``exits start`` / ``exits stop`` on every host side."""

    def __init__(
        self,
        store: Store,
        *,
        note: Callable[[str], None] | None = None,
        sides: Callable[[Target], dict[str, Target]] | None = None,
    ) -> None:
        self.store = store
        self._note = note or (lambda line: print(f"vmtax: {line}", file=sys.stderr))
        self._sides = sides
        self._lock = threading.Lock()
        self._noted: set[str] = set()
        #: target name -> level -> (side, error of its start or "")
        self._started: dict[str, dict[str, tuple[Target, str]]] = {}
        self.saved: list[int] = []
        #: (target name, plan entry) -> level -> exit code -> exits of one start-up of that
        #: entry's runs (``_calibrate``)
        self._startup: dict[tuple[str, str], dict[str, dict[int, int]]] = {}

    def note_once(self, line: str) -> None:
        with self._lock:
            if line in self._noted:
                return
            self._noted.add(line)
        self._note(line)

    def _calibrate(
        self, target: Target, sides: dict[str, Target], key: tuple[str, str], args: list[str]
    ) -> None:
        """Once per target and plan entry, before its first run: the exits of one invocation
        of the entry's own arguments that is all start-up (two iterations, no warm-up: the
        probe's set-up, a workload's servers), so a table can tell the probe's exits per
        iteration from it."""
        startup: dict[str, dict[int, int]] = {}
        for level, side in sides.items():
            why = ""
            for _ in range(CALIBRATION_TRIES):
                got, why = self._record(target, side, args)
                if got is not None:
                    startup[level] = got
                    break
            else:
                self.note_once(
                    f"exits: {target.name}: the start-up's exits at {level} were not measured "
                    f"({why}); its exits per iteration include them"
                )
        with self._lock:
            self._startup[key] = startup

    @staticmethod
    def _record(target: Target, side: Target, args: list[str]) -> tuple[dict[int, int] | None, str]:
        """One agent invocation of ``args`` on ``target``, recorded on ``side``: (its exits by
        code, "") when the profile is complete, else (None, why not)."""
        err = _start(target, side)
        if err:
            return None, f"start: {err}"
        try:
            # As a planned run runs: a workload's servers and tools, a probe's agent.
            for _ in run_lines(target, args, REQUEST_TIMEOUT_S):
                pass
        except VmtaxError as exc:
            _request(side, ["exits", "stop"])  # removes the recording's triggers
            return None, f"the agent: {exc.message}"
        got, err = _request(side, ["exits", "stop"])
        if got is None:
            return None, f"stop: {err}"
        if not got.get("complete"):
            return None, "; ".join(map(str, got.get("problems") or ["incomplete"]))
        return {int(r["code"]): int(r["count"]) for r in got.get("reasons", [])}, ""

    def before_run(self, target: Target, step: Step, args: list[str] | None = None) -> None:
        key = (str(target.name), str(getattr(step, "entry", "")))
        try:
            sides = (self._sides or host_sides)(target)
        except Exception as exc:  # an observer must not raise: the run goes on
            sides = {}
            self.note_once(f"exits: {target.name}: cannot find its host side: {exc}")
        if not sides:
            self.note_once(
                f"exits: not recorded for {target.name}: no host side reachable "
                "(only a guest under KVM has one; under TCG nothing is a VM exit)"
            )
        if sides and key not in self._startup:
            cut = probe_startup_args(args) if args else startup_args(_tsc_hz(target))
            self._calibrate(target, sides, key, cut)
        started: dict[str, tuple[Target, str]] = {}
        for level, side in sides.items():
            err = _start(target, side)
            if err:
                self.note_once(f"exits: {target.name}: {level} cannot record: {err}")
            started[level] = (side, err)
        with self._lock:
            self._started[target.name] = started

    def after_run(self, target: Target, step: Step, run_id: int, status: str) -> None:
        del status
        key = (str(target.name), str(getattr(step, "entry", "")))
        with self._lock:
            started = self._started.pop(target.name, {})
        for level, (side, err) in started.items():
            if err:
                profile: dict[str, Any] = {"complete": False, "problems": [f"start: {err}"]}
            else:
                got, stop_err = _request(side, ["exits", "stop"])
                profile = got or {"complete": False, "problems": [f"stop: {stop_err}"]}
            startup = self._startup.get(key, {}).get(level)
            if startup is not None:
                profile = {**profile, "startup": startup}
            try:
                self.saved.append(save_profile(self.store, run_id, level, profile))
            except Exception as exc:  # the run is stored already; say why its profile is not
                self.note_once(f"exits: {target.name}: profile of run {run_id} not stored: {exc}")

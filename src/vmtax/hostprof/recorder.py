"""Record an exit profile around every probe run (``vmtax run --exits[=counts|trace]``).

A ``Recorder`` is a run observer (``vmtax.runner.RunObserver``). Before a run it asks the
agent on each host side of the target (``target.host_sides()``: the levels whose KVM runs the
measured guest) to begin a recording; after the run is stored it ends it and stores the
profile against the run id. In mode ``counts`` both ends are a reading of KVM's own per-vCPU
counters (``exits stats``, see ``kvmstats``): nothing runs in the guest's way. In mode
``trace`` they are ``exits start`` / ``exits stop`` (tracefs histograms: exits by reason and
their handling time), and the counters are read around them too, into the profile's detail.
Nothing here can lose a run: a side that cannot record (no tracefs, not root, no QMP, the
guest gone) gets a profile marked incomplete with the reason, and a one-line note on stderr
the first time.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from vmtax.contract import Fingerprint, probe_startup_args, startup_args
from vmtax.errors import VmtaxError
from vmtax.hostprof import kvmstats
from vmtax.hostprof.modes import EVERY, mode_for
from vmtax.hostprof.store import save_profile
from vmtax.targets.base import AgentTimeout, vm_pid
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
    if side.level == "L0":  # the side at L0 is this machine (QemuTarget.host_sides)
        pid = vm_pid(target)
        return ["--qemu", str(pid)] if pid is not None else ["--qemu", "auto"]
    return ["--qemu", "auto"]


def _tsc_hz(target: Target) -> float | None:
    """The target's TSC rate from its fingerprint, as the runner passes it to every run."""
    try:
        text = "".join(target.run_agent(["env", "--format", "json"], REQUEST_TIMEOUT_S))
        return Fingerprint.model_validate_json(text).cpu.tsc_hz
    except Exception:  # noqa: BLE001 - without it the start-up is recorded as a full one
        return None


class _Gone(VmtaxError):
    """A request to a host side timed out: its agent was killed, and with a guest's host side
    the guest went too (``QemuTarget._serve``); its next request boots the guest again."""


def _request(side: Target, args: list[str]) -> tuple[dict[str, Any] | None, str]:
    """Run ``vmtax-probe ARGS`` on ``side``: (its JSON object, "") or (None, the error)."""
    try:
        return _asked(side, args)
    except _Gone as exc:
        return None, exc.message


def _asked(side: Target, args: list[str]) -> tuple[dict[str, Any] | None, str]:
    """As ``_request``, but a request that timed out raises _Gone."""
    try:
        text = "".join(side.run_agent(args, REQUEST_TIMEOUT_S)).strip()
    except AgentTimeout as exc:
        raise _Gone(exc.message) from None
    except VmtaxError as exc:
        return None, exc.message
    objects = list(_objects([text]))
    return (objects[-1], "") if objects else (None, _why_not(side))


def _why_not(side: Target) -> str:
    """The last line the agent on ``side`` wrote to stderr: why it printed no answer."""
    err = (side.last_stderr or "").strip().splitlines()
    return (err[-1] if err else "no output").removeprefix("vmtax-probe: error: ")


def _start(target: Target, side: Target) -> str:
    """``exits start`` for ``target``'s guest on ``side``: "" or the error (_Gone when it
    timed out). Only inside a vmtax guest may the agent mount tracefs itself."""
    mount = [] if side.level == "L0" else ["--mount"]  # L1 and L2 sides are vmtax guests
    _, err = _asked(side, ["exits", "start", *_qemu_arg(target, side), *mount])
    return err


def _stop(side: Target) -> tuple[dict[str, Any] | None, str, bool]:
    """``exits stop`` on ``side``: (the profile, "", False), or (None, the error, whether the
    guest went). The agent prints the profile before it removes the triggers; when the
    removal is what hangs, the profile came and the request's timeout is returned with it,
    as (profile, the timeout, True)."""
    lines: list[str] = []
    try:
        for line in side.run_agent(["exits", "stop"], REQUEST_TIMEOUT_S):
            lines.append(line)
    except AgentTimeout as exc:
        got = _stop_profile(lines)
        return got, f"the teardown did not finish: {exc.message}", True
    except VmtaxError as exc:
        return None, exc.message, False
    got = _stop_profile(lines)
    return (got, "", False) if got is not None else (None, _why_not(side), False)


def _stop_profile(lines: list[str]) -> dict[str, Any] | None:
    """The profile among ``exits stop``'s lines, with its teardown's problems, or None."""
    profile: dict[str, Any] | None = None
    cleanup: list[str] = []
    for obj in _objects(lines):
        if obj.get("type") == "exits_cleanup":
            cleanup += [str(p) for p in obj.get("problems") or []]
        elif obj.get("type") == "exits":
            profile = obj
    if profile is not None and cleanup:
        profile["problems"] = [*(profile.get("problems") or []), f"cleanup: {'; '.join(cleanup)}"]
    return profile


def _objects(lines: list[str]) -> Iterator[dict[str, Any]]:
    for line in "".join(lines).splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _stats_args(target: Target, side: Target) -> list[str]:
    """The request for one reading of KVM's per-vCPU counters of ``target``'s guest."""
    return ["exits", "stats", *_qemu_arg(target, side)]


def _reading(target: Target, side: Target) -> tuple[dict[str, Any] | None, str]:
    """One reading of KVM's per-vCPU counters of ``target``'s guest on ``side``."""
    return _request(side, _stats_args(target, side))


#: What a begun recording carries to its end: the error of its start ("" when it began) and
#: the counters' reading before the run (None when they could not be read).
Begun = tuple[str, dict[str, Any] | None]


def begin(
    mode: str, target: Target, side: Target, note: Callable[[str], None] = lambda line: None
) -> Begun:
    """Start recording ``target``'s exits on ``side``. A request that times out there took
    the guest with it (its agent cannot be interrupted): the guest boots again and the
    recording is begun once more, so that one hung request costs a boot, not the run's
    profile (``note`` says so)."""
    try:
        return _begin_once(mode, target, side)
    except _Gone as exc:
        note(f"exits: {side.name}: {exc.message}; booting it again to begin once more")
    try:
        return _begin_once(mode, target, side)
    except _Gone as exc:
        return (f"stats: {exc.message}" if mode == "counts" else exc.message), None


def _begin_once(mode: str, target: Target, side: Target) -> Begun:
    before, err = _asked(side, _stats_args(target, side))
    if mode == "counts":
        return (f"stats: {err}" if before is None else ""), before
    return _start(target, side), before


#: The key ``end`` adds to a profile when its request to the side timed out: the side's
#: agent was killed, and a guest's host side took the guest with it (``_Gone``).
GONE = "guest_gone"


def end(mode: str, target: Target, side: Target, begun: Begun) -> dict[str, Any]:
    """End a recording: the profile to store (or one marked incomplete, saying why), with
    ``GONE`` set when the request timed out."""
    err, before = begun
    if err:
        if mode == "trace":
            _request(side, ["exits", "stop"])  # removes whatever the failed start set up
        return {"complete": False, "problems": [f"start: {err}" if mode == "trace" else err]}
    if mode == "counts":
        try:
            after, err = _asked(side, _stats_args(target, side))
        except _Gone as exc:
            return {"complete": False, "problems": [f"stats: {exc.message}"], GONE: True}
        if after is None or before is None:
            return {"complete": False, "problems": [f"stats: {err}"]}
        return kvmstats.profile(before, after)
    got, err, gone = _stop(side)
    if got is None:
        return {"complete": False, "problems": [f"stop: {err}"], GONE: gone}
    if gone:  # its counts were read; the guest they would be read in again is not there
        return {**got, "teardown": err, GONE: True}
    after, _ = _reading(target, side)
    if before is not None and after is not None:
        counted = kvmstats.profile(before, after)
        got["kvm_stats"] = {r["name"]: r["count"] for r in counted["reasons"]}
        got["kvm_stats"]["exits"] = counted["hits"]
    return got


class Recorder:
    """Brackets each run with ``exits start`` / ``exits stop`` on every host side, in the
    mode of the measured target's level: ``modes`` as ``modes.parse_modes`` gives it (per
    level, ``*`` for the levels not named; a level without a mode is not recorded), else
    ``mode`` for every level."""

    def __init__(
        self,
        store: Store,
        *,
        mode: str = "counts",
        modes: dict[str, str] | None = None,
        note: Callable[[str], None] | None = None,
        sides: Callable[[Target], dict[str, Target]] | None = None,
    ) -> None:
        self.modes = dict(modes) if modes is not None else {EVERY: mode}
        for m in self.modes.values():
            if m not in ("counts", "trace"):
                raise ValueError(f"exit recorder mode must be counts or trace, not {m!r}")
        self.store = store
        self.mode = mode
        self._note = note or (lambda line: print(f"vmtax: {line}", file=sys.stderr))
        self._sides = sides
        self._lock = threading.Lock()
        self._noted: set[str] = set()
        #: target name -> level -> (side, what its begin() gave)
        self._started: dict[str, dict[str, tuple[Target, Begun]]] = {}
        self.saved: list[int] = []
        #: (target name, plan entry) -> level -> exit code -> exits of one start-up of that
        #: entry's runs (``_calibrate``)
        self._startup: dict[tuple[str, str], dict[str, dict[int, int]]] = {}

    def mode_for(self, target: Target) -> str:
        """The mode ``target``'s runs are recorded in ("" for none): its level's."""
        return mode_for(self.modes, str(getattr(target, "level", "")))

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
        why: dict[str, str] = {}
        for _ in range(CALIBRATION_TRIES):
            # Every side not measured yet records the same invocation: one agent start-up
            # for all of them (at L3 an invocation costs seconds of a nested stack).
            todo = {level: side for level, side in sides.items() if level not in startup}
            if not todo:
                break
            got = self._record(self.mode_for(target), target, todo, args, self._note)
            for level, (counts, reason) in got.items():
                if counts is not None:
                    startup[level] = counts
                else:
                    why[level] = reason
        for level in sides:
            if level not in startup:
                self.note_once(
                    f"exits: {target.name}: the start-up's exits at {level} were not measured "
                    f"({why.get(level, 'not tried')}); its exits per iteration include them"
                )
        with self._lock:
            self._startup[key] = startup

    @staticmethod
    def _record(
        mode: str,
        target: Target,
        sides: dict[str, Target],
        args: list[str],
        note: Callable[[str], None],
    ) -> dict[str, tuple[dict[int, int] | None, str]]:
        """One agent invocation of ``args`` on ``target``, recorded on every one of
        ``sides``: by level, (its exits by code, "") when that profile is complete, else
        (None, why not)."""
        out: dict[str, tuple[dict[int, int] | None, str]] = {}
        begun: dict[str, Begun] = {}
        for level, side in sides.items():
            b = begin(mode, target, side, note)
            if b[0]:
                end(mode, target, side, b)
                out[level] = (None, f"start: {b[0]}")
            else:
                begun[level] = b
        if not begun:
            return out
        failed = ""
        try:
            # As a planned run runs: a workload's servers and tools, a probe's agent.
            for _ in run_lines(target, args, REQUEST_TIMEOUT_S):
                pass
        except VmtaxError as exc:
            failed = f"the agent: {exc.message}"
        for level, b in begun.items():
            got = end(mode, target, sides[level], b)  # also removes the recording's triggers
            if failed:
                out[level] = (None, failed)
            elif not got.get("complete"):
                out[level] = (None, "; ".join(map(str, got.get("problems") or ["incomplete"])))
            else:
                out[level] = ({int(r["code"]): int(r["count"]) for r in got.get("reasons", [])}, "")
        return out

    def before_run(self, target: Target, step: Step, args: list[str] | None = None) -> None:
        mode = self.mode_for(target)
        if not mode:  # its level is not recorded (--exits L2=trace names another level)
            return
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
        started: dict[str, tuple[Target, Begun]] = {}
        for level, side in sides.items():
            begun = begin(mode, target, side, self._note)
            if begun[0]:
                self.note_once(f"exits: {target.name}: {level} cannot record: {begun[0]}")
            started[level] = (side, begun)
        with self._lock:
            self._started[target.name] = started

    def after_run(self, target: Target, step: Step, run_id: int, status: str) -> None:
        del status
        mode = self.mode_for(target)
        key = (str(target.name), str(getattr(step, "entry", "")))
        with self._lock:
            started = self._started.pop(target.name, {})
        went = ""  # the level whose request took the guest with it
        for level, (side, begun) in started.items():
            if went:
                # Its recording went with the guest: asking would boot another to say so.
                why = f"stop: the guest went when {went}'s request timed out"
                profile: dict[str, Any] = {"complete": False, "problems": [why]}
            else:
                profile = end(mode, target, side, begun)
                went = level if profile.pop(GONE, False) else ""
            if profile.get("teardown"):
                self.note_once(f"exits: {level}: {profile['teardown']} (the counts were read)")
            startup = self._startup.get(key, {}).get(level)
            if startup is not None:
                profile = {**profile, "startup": startup}
            try:
                recorder = "kvm-stats" if mode == "counts" else "tracefs"
                self.saved.append(save_profile(self.store, run_id, level, profile, recorder))
            except Exception as exc:  # the run is stored already; say why its profile is not
                self.note_once(f"exits: {target.name}: profile of run {run_id} not stored: {exc}")

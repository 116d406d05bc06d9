"""The run use case: validate once, plan, open the store, size runs, execute, resume, finish.

`vmtax run` and :func:`vmtax.api.run` both start experiments here; the CLI only parses its
options into a :class:`RunRequest` and renders what comes back (the table, the report).
"""

from __future__ import annotations

import contextlib
import random
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from vmtax import doctor
from vmtax import runner as rn
from vmtax.doctor import leftovers
from vmtax.errors import VmtaxError
from vmtax.execution import Progress
from vmtax.experiment.command import command_line
from vmtax.experiment.lookup import experiment_id, reconcile
from vmtax.experiment.report import Reporting, RunReport, after_run, check_template
from vmtax.experiment.request import RunRequest
from vmtax.fleet.run import AnsibleRunner, is_inventory
from vmtax.hostprof.modes import parse_mode, parse_modes, stored_modes
from vmtax.hostprof.recorder import Recorder
from vmtax.plan import bounds
from vmtax.plan.params import apply_params
from vmtax.plan.plan import Plan, build_plan
from vmtax.plan.suite import load_suite
from vmtax.plan.targets import make_targets
from vmtax.store import Store
from vmtax.targets.local import LocalTarget
from vmtax.targets.spec import LevelSpec, SshSpec, TargetSpec
from vmtax.version import __version__
from vmtax.workloads import image_contents, package_capabilities

Notice = Callable[[str], None]


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class Finished:
    """An experiment after `run` or `resume`: its id, its store, and whether it failed."""

    experiment_id: int
    store: Store
    outcome: rn.Outcome | None  # None: a resume found every run already there
    problem: str | None = None  # one line when a target failed as a whole
    report: RunReport | None = None  # the report written after it (experiment/report.py)


def _ssh_hosts_resolve(specs: list[TargetSpec]) -> None:
    """Every SSH target's host has an address (VmtaxError naming the first that has none):
    found at the start instead of after the guest levels beside it were booted. A name
    that only the user's ssh_config knows (a Host alias) is left to the connection."""
    for spec in specs:
        if not isinstance(spec, SshSpec):
            continue
        try:
            socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if _ssh_config_names(spec.host):
                continue
            raise VmtaxError(
                f"SSH target {spec.url}: cannot resolve host {spec.host!r} ({exc.strerror}); "
                "nothing was started"
            ) from None
        except (UnicodeError, ValueError) as exc:
            raise VmtaxError(f"SSH target {spec.url}: bad host name ({exc})") from None


def _ssh_config_names(host: str) -> bool:
    """Whether ~/.ssh/config names ``host`` on a Host line (an alias resolved there)."""
    try:
        text = (Path.home() / ".ssh" / "config").read_text(errors="replace")[:1_000_000]
    except OSError:
        return False
    return any(
        host in line.split()[1:] or "*" in line
        for line in text.splitlines()
        if line.strip().lower().startswith("host ")
    )


def run(
    request: RunRequest,
    *,
    progress: Progress | None = None,
    notice: Notice = _to_stderr,
    reporting: Reporting = Reporting(),  # noqa: B008 - frozen, so one shared default is safe
) -> Finished:
    """Start an experiment as `vmtax run` does, run it to the end (or a failure) and write
    its report (VMTAX_RUN_REPORT; ``reporting`` says how)."""
    checked = request.validate()
    check_template()
    specs = request.target_specs(checked.levels)
    the_suite, source = load_suite(request.suite)
    _ssh_hosts_resolve(specs)  # needs no boot: before KVM is probed and a guest booted
    _require_level_packages(specs)
    local = _local_target()
    available = rn.list_probes(local)
    local_fp = rn.fingerprint(local)
    seed = request.seed
    if seed is None:
        seed = the_suite.seed
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    plan = build_plan(
        the_suite,
        source=source,
        seed=seed,
        targets=specs,
        probes=request.probes or None,
        runs=request.runs,
        timeout=request.timeout,
        duration=request.duration,
        **checked.sampling,
    )
    # What a profile gave is said once the request has passed every check below (a bad
    # preset is refused in one line, with nothing said about profiles before it).
    profile_lines: list[str] = []
    profiled = _profile_design(request, specs, checked.labels, local_fp, plan, profile_lines.append)
    if profiled is not None:
        # A noise profile's design is the first stage: its boots, its runs in them. Then the
        # boot-level looks judge the interval `compare` will print, as without a profile, and
        # add boots while the target is not reached and the budget lasts: the profile may
        # have been measured on a quieter machine than the one the run meets.
        specs = [_with_boots(s, profiled.boots) for s in specs]
        plan = build_plan(
            the_suite, source=source, seed=seed, targets=specs, probes=request.probes or None,
            runs=None, timeout=request.timeout, duration=request.duration,
            first_stage_runs=profiled.runs, **checked.sampling,
        )  # fmt: skip
    if plan.sampling and plan.sampling.get("unreachable"):
        notice(f"vmtax: warning: {plan.sampling['unreachable']}")
    elif plan.sampling and plan.sampling.get("raised_for"):
        notice(
            f"vmtax: at least {plan.sampling['min_runs']} runs a side, so that "
            f"{plan.sampling['raised_for']} comparisons can reach p < 0.05 after Holm"
        )
    if plan.sampling:
        plan.sampling["boot_cost_s"] = request.boot_cost  # stored: a resume keeps it
        # Given, it is used as given; otherwise each guest's measured boots replace it as
        # they come (sampling.adaptive: AdaptiveSampler._boot_cost).
        plan.sampling["boot_cost_given"] = request.boot_cost_s is not None
        # Adaptive sampling's statistics pull in scipy (over a second): only when asked for.
        from vmtax.sampling.runlength import apply

        fixed = request.duration is not None
        apply(plan, overhead_s=rn.run_overhead(local, local_fp), fixed=fixed)
    apply_params(plan.entries, checked.params, [*available, *rn.workload_infos()])
    rn.check_probes(plan, available)
    _require_workload_packages(plan)
    bounds.check_params(plan.entries, [*available, *rn.workload_infos()])
    built, limit = make_targets(
        specs, accept_new_host_key=request.accept_new_host_key, contents=image_contents()
    )
    for line in profile_lines:
        notice(line)
    # Opened once the request, the machine and the targets (a preset, an SSH port) are known
    # to be able to run it: a run refused for any of them leaves no empty store behind.
    store = Store.open(request.db)
    options = {
        "level": request.level, "labels": checked.labels,
        "exits": stored_modes(parse_modes(request.exits)),
        "noise": _noise_keys(request, specs, checked.labels, local_fp),
    }  # fmt: skip
    exp_id = store.create_experiment(
        command=command_line(request.argv, store.url_display),
        suite=plan.suite,
        seed=plan.seed,
        plan=plan.to_dict() | {"controller": rn.controller_identity(), "options": options},
        vmtax_version=__version__,
        agent_version=local_fp.agent_version,
    )
    # The local fingerprint is reused for the local target instead of measuring it twice.
    fps = {i: local_fp for i, s in enumerate(specs) if s.kind == "local"}
    finished = execute(
        store, plan, built, exp_id, done=set(), level=request.level, labels=checked.labels,
        max_workers=limit or 4, fingerprints=fps, exits=parse_modes(request.exits),
        progress=progress, started=request.started,
        accept_new_host_key=request.accept_new_host_key,
    )  # fmt: skip
    _grow_profiles(finished, specs, checked.labels, local_fp, request, notice)
    return _reported(reporting, finished)


def resume(
    ref: str,
    *,
    db: str | None,
    accept_new_host_key: bool = False,
    progress: Progress | None = None,
    notice: Notice = _to_stderr,
    reporting: Reporting = Reporting(),  # noqa: B008 - frozen, so one shared default is safe
) -> Finished:
    """Finish the missing runs of an interrupted experiment (``ref``: an id or 'latest') and
    write its report, as `run` does."""
    store = open_existing(db)
    exp_id = experiment_id(store, ref)
    reconcile(store)
    exp = store.experiment(exp_id)
    plan_data = exp.get("plan") or {}
    if exp["status"] == "running":
        ident = plan_data.get("controller") or {}
        raise VmtaxError(
            f"experiment {exp_id} is still running (pid {ident.get('pid', '?')} on "
            f"{ident.get('host', '?')}); stop it first or wait for it"
        )
    plan = Plan.from_dict(plan_data)
    done = set(store.completed_plan_indices(exp_id))
    missing = [s for s in plan.steps if s.index not in done]
    if not missing and (not plan.sampling or exp["status"] == "ok"):
        notice(f"experiment {exp_id} has every planned run; nothing to resume")
        return _reported(reporting, Finished(exp_id, store, None))
    _refuse_beside_leftovers(plan, notice)
    options = plan_data.get("options") or {}
    built, limit = make_targets(
        plan.targets, accept_new_host_key=accept_new_host_key, contents=image_contents()
    )
    store.reopen_experiment(exp_id, controller=rn.controller_identity())
    finished = execute(
        store, plan, built, exp_id, done=done, level=options.get("level"),
        labels=options.get("labels") or {}, max_workers=limit or 4, fingerprints={},
        exits=_stored_exits(options.get("exits")), progress=progress, started=None,
        accept_new_host_key=accept_new_host_key,
    )  # fmt: skip
    return _reported(reporting, finished)


def _refuse_beside_leftovers(plan: Plan, notice: Notice) -> None:
    """A guest an earlier vmtax left running (one killed before its guests died with it)
    would load this machine while the resumed runs are measured on it: refused, in one line.
    Its scratch directories only take disk space: named, one warning each."""
    found = leftovers.find()
    here = any(spec.on_this_machine for spec in plan.targets)
    guests = [x for x in found if x.kind == "guest"] if here else []
    for item in found:
        if item not in guests:
            notice(
                f"vmtax: warning: left by an earlier vmtax: {item.line()} "
                "(`vmtax doctor --clean` removes it)"
            )
    if guests:
        more = f" (and {len(guests) - 1} more)" if len(guests) > 1 else ""
        raise VmtaxError(
            f"a guest left by an earlier vmtax runs on this machine: {guests[0].line()}{more}; "
            "the resumed runs would be measured beside it: `vmtax doctor --clean` stops it"
        )


def open_existing(db: str | None) -> Store:
    """A store that must exist already (to resume in it): opened read-only first, which
    refuses a missing one in one line, where a writable open would create it empty."""
    Store.open(db, read_only=True, check_schema=False).close()
    return Store.open(db)


def execute(
    store: Store,
    plan: Plan,
    built: list[Any],
    exp_id: int,
    *,
    done: set[int],
    level: str | None,
    labels: dict[str, str],
    max_workers: int,
    fingerprints: dict[int, Any],
    exits: dict[str, str],
    progress: Progress | None,
    started: float | None,
    accept_new_host_key: bool = False,
) -> Finished:
    """Run ``plan``'s missing steps on ``built`` and mark the experiment's status."""
    # An inventory's hosts run through Ansible (vmtax.fleet), the other targets in threads.
    make: Any = rn.Runner
    if is_inventory(built):
        make = partial(AnsibleRunner, accept_new_host_key=accept_new_host_key)
    runner = make(
        store,
        plan,
        built,
        level=level,
        labels=labels,
        progress=progress,
        max_workers=max_workers,
        fingerprints=fingerprints,
        observers=_exit_recorders(store, exits),
        step_source=_adaptive(store, plan, exp_id, started),
    )
    shown = progress if isinstance(progress, contextlib.AbstractContextManager) else None
    try:
        with shown or contextlib.nullcontext():
            outcome = runner.execute(exp_id, done)
    except KeyboardInterrupt:
        raise VmtaxError(
            f"interrupted: experiment {exp_id} is marked interrupted; finish it with "
            f"`vmtax run --resume {exp_id}`",
            exit_code=130,
        ) from None
    return Finished(exp_id, store, outcome, outcome.summary_error())


def _reported(how: Reporting, done: Finished) -> Finished:
    done.report = after_run(done.store, done.experiment_id, how)
    return done


def _require_level_packages(specs: list[TargetSpec]) -> None:
    guests = [s for s in specs if isinstance(s, LevelSpec) and s.is_guest]
    if guests:
        kvm_inside = any(s.inner_accel == "kvm" for s in guests)
        doctor.require("levels", "testbed" if kvm_inside else "levels", what="--levels")


def _require_workload_packages(plan: Plan) -> None:
    """Every package the chosen workloads lack, named in one line before anything starts."""
    # Their servers and tools must be on this machine (guests get them from its image); each
    # workload's recipe names its packages.
    chosen = [c for c in package_capabilities() if c.name in plan.probes()]
    if chosen:
        doctor.require_capabilities(chosen, what=f"workload {', '.join(c.name for c in chosen)}")


def _exit_recorders(store: Store, exits: dict[str, str]) -> list[Any]:
    """One recorder for the run, its mode chosen per target's level (``exits``:
    ``modes.parse_modes``); none when no level is recorded."""
    if not exits:
        return []
    return [Recorder(store, modes=exits)]


def _stored_exits(stored: Any) -> dict[str, str]:  # noqa: ANN401 - a plan's JSON
    """The recorder per level a stored experiment ran with: a mapping (per level) or one
    mode; ``true`` was a tracing run."""
    if isinstance(stored, dict):
        return {str(k): parse_mode(str(v)) for k, v in stored.items()}
    return parse_modes("trace" if stored is True else stored or False)


def _adaptive(store: Store, plan: Plan, exp_id: int, started: float | None) -> Any:
    if not plan.sampling:
        return None
    # scipy again (see above): loaded only for an adaptive plan.
    from vmtax.sampling.adaptive import AdaptiveSampler

    return AdaptiveSampler(store, plan, exp_id, started=started)


def _local_target() -> Any:
    target = LocalTarget()
    target.prepare()
    return target


def _profile_design(
    request: RunRequest,
    specs: list[TargetSpec],
    labels: dict[str, str],
    local_fp: Any,  # noqa: ANN401 - the agent's Fingerprint
    plan: Plan,
    notice: Notice,
) -> Any:  # noqa: ANN401 - calibrate.RunDesign with boots, or None
    """The design a noise profile gives this run (vmtax.noise), after saying which profile
    was used or why none was; None keeps today's design. A profile never breaks a run."""
    if not _has_guest(specs):
        return None
    try:
        # heavy: scipy (vmtax.noise), only for a run with a guest level
        from vmtax.experiment.calibrate import run_design

        precision = plan.sampling.get("precision") if plan.sampling else None
        fp = local_fp.model_dump(mode="json", by_alias=True)
        budget = plan.sampling.get("budget_s") if plan.sampling else None
        design = run_design(
            request, specs, labels, fp, list(plan.entries), precision, budget=budget
        )
    except Exception as exc:  # noqa: BLE001 - a profile must not break a run
        notice(f"noise profile: not used ({type(exc).__name__}: {exc}); today's design")
        return None
    if design is None:
        return None
    notice(design.line)
    return design if design.boots is not None else None


def _noise_keys(
    request: RunRequest,
    specs: list[TargetSpec],
    labels: dict[str, str],
    local_fp: Any,  # noqa: ANN401 - the agent's Fingerprint
) -> dict[str, Any] | None:
    """The noise-profile keys of this experiment's guest configurations (stored with it, so
    that `vmtax compare` finds their profile); None without a guest level."""
    if not _has_guest(specs):
        return None
    # heavy: scipy (vmtax.noise), only for a run with a guest level (loaded already by then)
    from vmtax.experiment.calibrate import noise_keys

    fp = local_fp.model_dump(mode="json", by_alias=True)
    return noise_keys(specs, labels, fp, duration=request.duration, suite=request.suite)


def _is_guest_level(spec: TargetSpec) -> bool:
    return isinstance(spec, LevelSpec) and spec.is_guest


def _has_guest(specs: list[TargetSpec]) -> bool:
    """A guest level vmtax boots among ``specs``: what a noise profile is about."""
    return any(_is_guest_level(s) for s in specs)


def _with_boots(spec: TargetSpec, boots: int) -> TargetSpec:
    if _is_guest_level(spec):
        return spec.model_copy(update={"boots": boots})
    return spec


def _grow_profiles(
    finished: Finished,
    specs: list[TargetSpec],
    labels: dict[str, str],
    local_fp: Any,  # noqa: ANN401 - the agent's Fingerprint
    request: RunRequest,
    notice: Notice,
) -> None:
    """Fold the experiment's boots into the matching noise profiles of this machine."""
    if not _has_guest(specs):
        return
    try:
        # heavy: scipy (vmtax.noise), only after a run with a guest level
        from vmtax.experiment.calibrate import grow

        fp = local_fp.model_dump(mode="json", by_alias=True)
        line = grow(
            finished.store, finished.experiment_id, specs, labels, fp,
            duration=request.duration, suite=request.suite,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a profile must not break a run
        notice(f"noise profile: not grown ({type(exc).__name__}: {exc})")
        return
    if line:
        notice(line)

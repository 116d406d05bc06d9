"""`vmtax run`: plan a suite, run it on this machine (or on levels / SSH hosts), store every
run, and print the study-A table."""

from __future__ import annotations

import contextlib
import random
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vmtax.errors import UsageError, VmtaxError
from vmtax.plan import bounds
from vmtax.plan.params import apply_params, parse_params

_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.+)$")
_LEVEL = re.compile(r"^L[0-3]$")
_RESERVED = {
    "exp",
    "experiment",
    "config",
    "level",
    "probe",
    "target",
    "hypervisor",
    "status",
    "run",
}


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("run")(run)


def run(
    suite: Annotated[
        str, typer.Option(help="Built-in suite name or a path to a suite .toml.")
    ] = "quick",
    probe: Annotated[
        list[str] | None,
        typer.Option(
            help="Run only this probe (repeatable); one the suite lacks runs with its defaults."
        ),
    ] = None,
    runs: Annotated[
        int | None, typer.Option(help="Runs per probe, 1..10000 (overrides the suite).")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Probe parameter key=value for every selected probe that has it (repeatable), "
            "checked against the range `vmtax probes` lists."
        ),
    ] = None,
    level: Annotated[
        str | None,
        typer.Option(
            help="Level label for this machine (default L0, with what the fingerprint detected)."
        ),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Extra configuration label key=value (repeatable).")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            help="Store URL (sqlite:///file.db, postgresql://...); default $VMTAX_DB or the "
            "user data dir."
        ),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Per-run timeout in seconds, at most 604800 (a week).")
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            help="Bound every run to this many seconds, at most 86400 (overrides the suite)."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Seed of the randomized run order, 0..9223372036854775807."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(help="Finish the missing runs of an interrupted experiment (id or 'latest')."),
    ] = None,
    levels: Annotated[
        str | None,
        typer.Option(help="Run at these levels, e.g. L0,L1,L2 (QEMU guests for L1 and above)."),
    ] = None,
    depth: Annotated[
        int | None,
        typer.Option(help="Nest guests N deep (1..3) and run at every level: --levels L0..LN."),
    ] = None,
    preset: Annotated[
        str,
        typer.Option(
            help="Guest sizing preset for --levels: seed-c, seed-a-overcommitted, "
            "seed-a-reserved; with --inner-accel kvm, kvm-testbed (the default there) or "
            "kvm-testbed-smp (L2 gets two vCPUs)."
        ),
    ] = "seed-c",
    accel: Annotated[str, typer.Option(help="auto | kvm | tcg, for --levels.")] = "auto",
    inner_accel: Annotated[
        str,
        typer.Option(
            help="tcg | kvm: how L2 and L3 run inside their hypervisor level. kvm boots them "
            "under the KVM of the level above (on this machine: KVM on the SVM that TCG "
            "emulates in L1), e.g. --levels L1,L2,L3 --inner-accel kvm."
        ),
    ] = "tcg",
    guest_net: Annotated[
        str,
        typer.Option(
            help="user: give L1 guests a virtio-net NIC on QEMU's user network, where this "
            "machine is 10.0.2.2 and guest ports 7100-7103 are forwarded from this machine, "
            "e.g. for --probe net --param peer=host (guest to host) or peer=from-host."
        ),
    ] = "",
    target: Annotated[
        list[str] | None, typer.Option(help="Run on ssh://user@host[:port] (repeatable).")
    ] = None,
    targets: Annotated[str | None, typer.Option(help="A hosts.toml fleet file.")] = None,
    accept_new_host_key: Annotated[
        bool, typer.Option(help="Trust an SSH host key seen for the first time.")
    ] = False,
    exits: Annotated[
        bool,
        typer.Option(
            help="Record each run's VM exits by reason on the level whose KVM runs it "
            "(see vmtax exits and docs/exits.md)."
        ),
    ] = False,
    precision: Annotated[
        str | None,
        typer.Option(
            help="Add runs until each probe's 95% CI half-width is at most this share of its "
            "mean, e.g. 2% (default: the suite's; --runs N turns it off)."
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            help="Time budget of adaptive sampling, e.g. 60s or 5m (default: the suite's)."
        ),
    ] = None,
    min_runs: Annotated[
        int | None, typer.Option(help="Runs every probe gets before adaptive sampling looks.")
    ] = None,
) -> None:
    """Run a suite of probes, store every run and print the study-A table.

    Example: vmtax run --suite quick --runs 5 --label note=baseline

    Example: vmtax run --levels L0,L1 (or --depth 2 for L0, L1 and L2 nested in L1)

    Example: vmtax run --levels L1,L2 --inner-accel kvm --probe cpuid

    Example: vmtax run --levels L0,L1 --guest-net user --probe net --param peer=host

    Example: vmtax run --precision 2% --budget 60s --min-runs 5
    """
    _COMMAND_START[0] = time.monotonic()  # an adaptive budget counts from here
    from vmtax import runner as rn
    from vmtax.plan.plan import build_plan
    from vmtax.plan.suite import load_suite
    from vmtax.plan.targets import make_targets

    sampling = _sampling_options(precision, budget, min_runs, runs)
    bounds.check_runs(runs)
    bounds.check_seed(seed)
    bounds.check_seconds(timeout, "--timeout", bounds.MAX_TIMEOUT_S)
    bounds.check_seconds(duration, "--duration", bounds.MAX_DURATION_S)
    params = parse_params(param or [])
    if accel not in {"auto", "kvm", "tcg"}:
        raise UsageError(f"--accel must be auto, kvm or tcg, got {accel!r}")
    if inner_accel not in {"kvm", "tcg"}:
        raise UsageError(f"--inner-accel must be kvm or tcg, got {inner_accel!r}")
    if level is not None and not _LEVEL.match(level):
        raise UsageError(f"--level must be L0, L1, L2 or L3, got {level!r}")
    labels = parse_labels(label or [])
    if depth is not None:
        if levels is not None:
            raise UsageError("give --depth or --levels, not both")
        if not 1 <= depth <= 3:
            raise UsageError(f"--depth must be 1, 2 or 3, got {depth}")
        levels = ",".join(f"L{n}" for n in range(depth + 1))
    if guest_net not in {"", "user"}:
        raise UsageError(f"--guest-net must be user, got {guest_net!r}")
    if guest_net and not re.search(r"L1", (levels or "").upper()):
        raise UsageError("--guest-net needs a guest level: --levels L0,L1")
    if guest_net and re.search(r"L[23]", (levels or "").upper()):
        raise UsageError("--guest-net reaches L1 guests only; L2 and L3 have no NIC")
    if inner_accel == "kvm" and not re.search(r"L[23]", (levels or "").upper()):
        raise UsageError("--inner-accel kvm needs a nested level: --levels L1,L2 or L1,L2,L3")
    if resume is not None:
        _resume(resume, db=db, accept_new_host_key=accept_new_host_key)
        return
    specs = target_specs(
        levels=levels,
        preset=preset,
        accel=accel,
        ssh=target or [],
        fleet=targets,
        inner_accel=inner_accel,
        guest_net=guest_net,
    )
    if level is not None and len(specs) > 1:
        raise UsageError("--level names one machine; with several targets each has its own")
    the_suite, source = load_suite(suite)
    store = _open_store(db)
    local = _local_target()
    available = rn.list_probes(local)
    local_fp = rn.fingerprint(local)
    chosen_seed = (
        seed
        if seed is not None
        else (
            the_suite.seed if the_suite.seed is not None else random.SystemRandom().randrange(2**31)
        )
    )
    plan = build_plan(
        the_suite,
        source=source,
        seed=chosen_seed,
        targets=specs,
        probes=probe or None,
        runs=runs,
        timeout=timeout,
        duration=duration,
        **sampling,
    )
    if plan.sampling and plan.sampling.get("unreachable"):
        print(f"vmtax: warning: {plan.sampling['unreachable']}", file=sys.stderr)
    elif plan.sampling and plan.sampling.get("raised_for"):
        print(
            f"vmtax: at least {plan.sampling['min_runs']} runs a side, so that "
            f"{plan.sampling['raised_for']} comparisons can reach p < 0.05 after Holm",
            file=sys.stderr,
        )
    if plan.sampling:
        from vmtax.sampling.runlength import apply

        apply(plan, overhead_s=rn.run_overhead(local, local_fp), fixed=duration is not None)
    apply_params(plan.entries, params, [*available, *rn.workload_infos()])
    rn.check_probes(plan, available)
    bounds.check_params(plan.entries, [*available, *rn.workload_infos()])
    built, limit = make_targets(specs, accept_new_host_key=accept_new_host_key)
    plan_dict = plan.to_dict() | {
        "controller": rn.controller_identity(),
        "options": {"level": level, "labels": labels, "exits": exits},
    }
    exp_id = store.create_experiment(
        command=_command_line(sys.argv[1:], store.url_display),
        suite=plan.suite,
        seed=plan.seed,
        plan=plan_dict,
        vmtax_version=_version(),
        agent_version=local_fp.agent_version,
    )
    # The local fingerprint is reused for the local target instead of measuring it twice.
    fps = {i: local_fp for i, s in enumerate(specs) if s["kind"] == "local"}
    _execute(
        store,
        plan,
        built,
        exp_id,
        done=set(),
        level=level,
        labels=labels,
        max_workers=limit or 4,
        fingerprints=fps,
        exits=exits,
    )


def _resume(ref: str, *, db: str | None, accept_new_host_key: bool) -> None:
    from vmtax import runner as rn
    from vmtax.cli.results_cmd import experiment_id, reconcile
    from vmtax.plan.plan import Plan
    from vmtax.plan.targets import make_targets

    store = _open_store(db)
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
        typer.echo(f"experiment {exp_id} has every planned run; nothing to resume")
        _finish(store, exp_id, status="ok")
        return
    options = plan_data.get("options") or {}
    built, limit = make_targets(plan.targets, accept_new_host_key=accept_new_host_key)
    store.reopen_experiment(exp_id, controller=rn.controller_identity())
    _execute(
        store,
        plan,
        built,
        exp_id,
        done=done,
        level=options.get("level"),
        labels=options.get("labels") or {},
        max_workers=limit or 4,
        fingerprints={},
        exits=bool(options.get("exits")),
    )


def _execute(
    store: Any,
    plan: Any,
    built: list[Any],
    exp_id: int,
    *,
    done: set[int],
    level: str | None,
    labels: dict[str, str],
    max_workers: int,
    fingerprints: dict[int, Any],
    exits: bool = False,
) -> None:
    from vmtax.runner import Runner

    err = Console(stderr=True)
    bar = RichProgress(err)
    runner = Runner(
        store,
        plan,
        built,
        level=level,
        labels=labels,
        progress=bar,
        max_workers=max_workers,
        fingerprints=fingerprints,
        observers=_exit_recorders(store, exits),
        step_source=_adaptive(store, plan, exp_id),
    )
    try:
        with bar, _sigterm_as_interrupt():
            outcome = runner.execute(exp_id, done)
    except KeyboardInterrupt:
        raise VmtaxError(
            f"interrupted: experiment {exp_id} is marked interrupted; finish it with "
            f"`vmtax run --resume {exp_id}`",
            exit_code=130,
        ) from None
    _finish(store, exp_id, status=outcome.status)
    problem = outcome.summary_error()
    if problem:
        raise VmtaxError(problem)


def _exit_recorders(store: Any, exits: bool) -> list[Any]:
    if not exits:
        return []
    from vmtax.hostprof.recorder import Recorder

    return [Recorder(store)]


def _finish(store: Any, exp_id: int, *, status: str) -> None:
    from vmtax.cli.report_cmd import after_run
    from vmtax.cli.results_cmd import out_console, print_table

    print_table(out_console(), store, exp_id)
    from vmtax.sampling.outcome import lines as precision_lines

    for line in precision_lines(store, exp_id):  # adaptive sampling: who missed the target
        typer.echo(line)
    after_run(store, exp_id)  # the report, written beside the table (VMTAX_RUN_REPORT)
    typer.echo(f"experiment {exp_id}")
    del status


def _sampling_options(
    precision: str | None, budget: str | None, min_runs: int | None, runs: int | None
) -> dict[str, Any]:
    """--precision / --budget / --min-runs as build_plan arguments; UsageError when bad."""
    from vmtax.plan.suite import parse_percent, parse_seconds

    if precision is not None and runs is not None:
        raise UsageError("give --runs (a fixed number) or --precision (adaptive), not both")
    if min_runs is not None and min_runs < 2:
        raise UsageError(f"--min-runs must be at least 2, got {min_runs}")
    try:
        pct = None if precision is None else parse_percent(precision)
    except ValueError as exc:
        raise UsageError(f"--precision {exc}") from None
    try:
        seconds = None if budget is None else parse_seconds(budget)
    except ValueError as exc:
        raise UsageError(f"--budget {exc}") from None
    return {"precision": pct, "budget": seconds, "min_runs": min_runs}


#: When the current `vmtax run` started (monotonic), so that --budget bounds the command.
_COMMAND_START: list[float | None] = [None]


def _adaptive(store: Any, plan: Any, exp_id: int) -> Any:
    if not plan.sampling:
        return None
    from vmtax.sampling.adaptive import AdaptiveSampler

    return AdaptiveSampler(store, plan, exp_id, started=_COMMAND_START[0])


def _command_line(argv: list[str], db_display: str) -> list[str]:
    """The command as typed, with the --db URL replaced by its password-free form."""
    out = ["vmtax"]
    skip = False
    for arg in argv:
        if skip:
            out.append(db_display)
            skip = False
        elif arg == "--db":
            out.append(arg)
            skip = True
        elif arg.startswith("--db="):
            out.append(f"--db={db_display}")
        else:
            out.append(arg)
    return out


def parse_labels(items: list[str]) -> dict[str, str]:
    """``key=value`` strings to a dict; bad syntax or a reserved key is a UsageError."""
    out: dict[str, str] = {}
    for item in items:
        m = _LABEL.match(item.strip())
        if not m:
            raise UsageError(f"--label must be key=value (letters, digits, _ . -), got {item!r}")
        key, value = m.group(1).lower(), m.group(2).strip()
        if key in _RESERVED:
            raise UsageError(f"--label key {key!r} is reserved for selectors; choose another")
        if "," in value:
            raise UsageError(f"--label value may not contain a comma: {item!r}")
        out[key] = value
    return out


def target_specs(
    *,
    levels: str | None,
    preset: str,
    accel: str,
    ssh: list[str],
    fleet: str | None,
    inner_accel: str = "tcg",
    guest_net: str = "",
) -> list[dict[str, Any]]:
    """What to run on, as plain data stored with the plan (so --resume rebuilds it)."""
    specs: list[dict[str, Any]] = []
    if levels:
        names = [x.strip().upper() for x in levels.split(",") if x.strip()]
        bad = [x for x in names if not _LEVEL.match(x)]
        if bad or not names or len(set(names)) != len(names):
            raise UsageError(f"--levels must be distinct levels like L0,L1,L2, got {levels!r}")
        # L0 goes through the level provisioner too: levels on one machine then take turns,
        # so L0 is never measured while a guest is busy beside it.
        level_spec = {"kind": "level", "preset": preset, "accel": accel}
        if inner_accel != "tcg":
            level_spec["inner_accel"] = inner_accel
        if guest_net:
            level_spec["guest_net"] = guest_net
        specs += [{**level_spec, "level": name} for name in names]
    for url in ssh:
        if not url.startswith("ssh://") or len(url) <= len("ssh://"):
            raise UsageError(f"--target must look like ssh://user@host[:port], got {url!r}")
        specs.append({"kind": "ssh", "url": url})
    if fleet:
        if not Path(fleet).is_file():
            raise UsageError(f"fleet file not found: {fleet}")
        from vmtax.plan.targets import fleet_size

        count, _ = fleet_size(fleet)
        specs += [
            {"kind": "fleet", "path": str(Path(fleet).resolve()), "index": i} for i in range(count)
        ]
    return specs or [{"kind": "local", "level": "L0"}]


class RichProgress:
    """A rich progress bar per target on stderr; silent when stderr is not a terminal."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def add_target(self, name: str, total: int) -> None:
        self._tasks[name] = self._bar.add_task(escape(name), total=total)

    def advance(self, name: str, description: str) -> None:
        self._bar.update(self._tasks[name], advance=1, description=escape(description))

    def finish(self, name: str, description: str, *, failed: bool) -> None:
        # Host names and errors are text, never rich markup.
        text = f"[bold red]{escape(description)}[/]" if failed else escape(description)
        self._bar.update(self._tasks[name], description=text)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    # SIGTERM gets the same clean stop as Ctrl-C: kill agents, mark the experiment interrupted.
    try:
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread (e.g. called from a test's thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _open_store(db: str | None) -> Any:
    from vmtax.store import Store

    return Store.open(db)


def _local_target() -> Any:
    from vmtax.targets.local import LocalTarget

    target = LocalTarget()
    target.prepare()
    return target


def _version() -> str:
    from vmtax import __version__

    return __version__

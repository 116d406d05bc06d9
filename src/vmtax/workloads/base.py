"""The workload plug-in contract, and what every workload shares.

A workload is an application benchmark against a real server or tool (MariaDB, lighttpd,
memcached, hackbench, openssl). Each one is a file in this package defining one ``Workload``:
its name, parameters with defaults, presets, what it measures, the mechanism it exercises,
its unit and direction. Running one yields the agent's own ``vmtax.probe/1`` JSON lines
(header, samples, run summary, end), so the runner stores a workload run exactly like a
probe run and ``compare``, ``artifacts`` and ``report`` work unchanged.

Where the client is the agent itself (``net``, ``relay``, ``http``, ``memcached``), the agent
prints the stream and the workload only starts the server and renames the header. Where the
client is a tool (``sysbench``, ``hackbench``, ``openssl``), the workload parses the tool's
output into per-request or per-iteration values and writes the stream with the contract's
pydantic models.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from vmtax.contract import SCHEMA, End, Fingerprint, Header, ParamInfo, ProbeInfo, RunSummary
from vmtax.contract import Samples as SamplesRecord
from vmtax.errors import VmtaxError
from vmtax.targets.base import Target, free_port  # noqa: F401 - the workloads import it from here
from vmtax.targets.servers import (  # noqa: F401 - the workloads import them from here
    TMP_PREFIX,
    Server,
    ServerError,
    ServerSpec,
    Spot,
    last_line,
    wait_port,
)
from vmtax.workloads.recipe import Needs, Recipe  # noqa: F401 - the workloads import them here

if TYPE_CHECKING:
    import numpy as np

ParamValue = bool | int | float | str
_BATCH = 4096


class WorkloadError(ServerError):
    """A workload could not run: a server did not start, a tool failed. One line."""


@dataclass(frozen=True)
class Param:
    name: str
    default: ParamValue
    help: str
    choices: tuple[str, ...] | None = None

    def info(self) -> ParamInfo:
        kind = (
            "choice"
            if self.choices
            else {bool: "bool", int: "int", float: "float", str: "str"}[type(self.default)]
        )
        return ParamInfo(
            name=self.name,
            default=self.default,
            help=self.help,
            kind=kind,  # type: ignore[arg-type]
            choices=list(self.choices) if self.choices else None,
        )


@dataclass
class Invocation:
    """One run of a workload, parsed from the agent-style arguments the plan builds."""

    name: str
    params: dict[str, ParamValue]
    iterations: int | None = None
    duration: float | None = None
    warmup: int | None = None
    timeout: float | None = None
    cpus: str | None = None
    kill_after: float = 60.0
    #: What the target's fingerprint already found (``--tsc-hz``, ``--brief-env``): given to
    #: the agent runs on the target itself, so none of them measures its nesting again
    #: (3,000 CPUIDs, each a VM exit: most of a short run's exits at L2).
    env_args: list[str] = field(default_factory=list)

    @classmethod
    def from_args(cls, args: Sequence[str], kill_after: float) -> Invocation:
        # ["run", NAME, "--runs", "1", "--iterations", N, "--duration", S, "--warmup", W,
        #  "--timeout", T, "--cpus", C, "--param", "k=v", ..., "--tsc-hz", HZ, "--brief-env"]
        # as plan.Plan.invocation builds; the last two are the agent's (see ``env_args``).
        inv = cls(name=args[1], params={}, kill_after=kill_after)
        it = iter(args[2:])
        for opt in it:
            if opt == "--brief-env":  # the one flag without a value
                inv.env_args.append(opt)
                continue
            val = next(it, "")
            if opt == "--tsc-hz":
                inv.env_args += [opt, val]
            elif opt == "--iterations":
                inv.iterations = int(val)
            elif opt == "--duration":
                inv.duration = float(val)
            elif opt == "--warmup":
                inv.warmup = int(val)
            elif opt == "--timeout":
                inv.timeout = float(val)
            elif opt == "--cpus":
                inv.cpus = val
            elif opt == "--param":
                key, _, raw = val.partition("=")
                inv.params[key] = raw
        return inv


class Workload(abc.ABC):
    """The plug-in contract. Subclasses set the class attributes and implement ``execute``."""

    name: ClassVar[str]
    summary: ClassVar[str]  # what one value is
    mechanism: ClassVar[str]  # the virtualization mechanism the workload exercises
    unit: ClassVar[str]
    better: ClassVar[str]  # "lower" or "higher"
    throughput_unit: ClassVar[str | None] = None
    params: ClassVar[tuple[Param, ...]] = ()
    #: Named parameter sets, e.g. a study's sizes: ``--param preset=study-c``.
    presets: ClassVar[dict[str, dict[str, ParamValue]]] = {}
    #: Everything it needs from a machine, declared once (see ``recipe.Recipe``).
    recipe: ClassVar[Recipe] = Recipe()
    #: Run shape when the suite says nothing.
    default_iterations: ClassVar[int] = 1000
    default_duration: ClassVar[float] = 2.0
    default_warmup: ClassVar[int] = 0

    @property
    def needs(self) -> tuple[str, ...]:
        """Programs it needs on the machine that runs the server or tool."""
        return self.recipe.programs

    @property
    def agent_only(self) -> bool:
        """True when only the agent runs (nothing to start): it then runs on any target."""
        return self.recipe.agent_only

    @property
    def guest_binaries(self) -> tuple[str, ...]:
        """Programs guest images carry for it (with their libraries)."""
        return self.recipe.binaries

    @property
    def guest_files(self) -> dict[str, bytes]:
        """Files guest images carry for it: path in the guest (no leading /) -> content."""
        return dict(self.recipe.files)

    @property
    def runs_in_guests(self) -> bool:
        """Whether vmtax's guests can run it: only the agent runs, or their images carry
        what it needs (busybox, which every image has, needs no more than its files)."""
        return self.agent_only or bool(self.recipe.binaries or self.recipe.files)

    def all_params(self) -> tuple[Param, ...]:
        preset = Param(
            "preset",
            "",
            "a named parameter set: " + (", ".join(self.presets) or "none"),
            tuple(["", *self.presets]) if self.presets else None,
        )
        return (*self.params, preset)

    def info(self) -> ProbeInfo:
        return ProbeInfo(
            name=self.name,
            summary=self.summary,
            mechanism=self.mechanism,
            unit=self.unit,
            better=self.better,  # type: ignore[arg-type]
            throughput_unit=self.throughput_unit,
            params=[p.info() for p in self.all_params()],
            needs_root=self.recipe.needs.root,
            arches=["x86_64"],
        )

    def resolve(self, given: dict[str, Any]) -> dict[str, ParamValue]:
        """Defaults, then the preset's values, then the given ones; typed like the defaults."""
        known = {p.name: p for p in self.all_params()}
        for key in given:
            if key not in known:
                raise WorkloadError(
                    f"workload {self.name} has no parameter {key!r} (it has: {', '.join(known)})"
                )
        preset = str(given.get("preset", ""))
        if preset and preset not in self.presets:
            raise WorkloadError(
                f"workload {self.name} has no preset {preset!r} "
                f"(it has: {', '.join(self.presets) or 'none'})"
            )
        out: dict[str, ParamValue] = {p.name: p.default for p in self.all_params()}
        out.update(self.presets.get(preset, {}))
        for key, raw in given.items():
            out[key] = _typed(known[key], raw)
        for p in self.all_params():
            if p.choices and str(out[p.name]) not in p.choices:
                raise WorkloadError(
                    f"workload {self.name}: {p.name}={out[p.name]!r} must be one of "
                    f"{', '.join(c or '(empty)' for c in p.choices)}"
                )
        return out

    @abc.abstractmethod
    def execute(self, ctx: Context) -> Iterator[str]:
        """Yield the run's ``vmtax.probe/1`` lines (one run)."""


def _typed(p: Param, raw: Any) -> ParamValue:
    if isinstance(p.default, bool):
        return str(raw).lower() in {"1", "true", "yes", "on"}
    try:
        if isinstance(p.default, int):
            return int(raw)
        if isinstance(p.default, float):
            return float(raw)
    except ValueError:
        raise WorkloadError(f"parameter {p.name}: {raw!r} is not a number") from None
    return str(raw)


@dataclass
class Context:
    """What ``execute`` gets: the target, the run shape and the resolved parameters."""

    workload: Workload
    target: Target
    inv: Invocation
    params: dict[str, ParamValue]
    env: Callable[[], Fingerprint]
    started: float = field(default_factory=time.monotonic)
    _boot: list[str | None] = field(default_factory=list, repr=False)

    @property
    def iterations(self) -> int:
        return self.inv.iterations or self.workload.default_iterations

    @property
    def duration(self) -> float:
        return self.inv.duration or self.workload.default_duration

    @property
    def warmup(self) -> int:
        return self.workload.default_warmup if self.inv.warmup is None else self.inv.warmup

    def repeat(self, once: Callable[[], float]) -> Iterator[str]:
        """The stream of a run whose values are ``once()`` calls (tool executions): warm-up
        calls first, then until the run's iterations or duration, whichever comes first."""
        warm = [once() for _ in range(self.warmup)]
        values: list[float] = []
        t0 = time.monotonic()
        stopped = "iterations"
        while len(values) < self.iterations:
            if len(values) >= 2 and time.monotonic() - t0 >= self.duration:
                stopped = "duration"
                break
            values.append(once())
        yield from self.stream(values, wall_s=time.monotonic() - t0, warm=warm, stopped_by=stopped)

    def left(self) -> float:
        """Seconds left before the controller's kill deadline, less a margin for cleanup."""
        return max(1.0, self.inv.kill_after - (time.monotonic() - self.started) - 2.0)

    def agent(
        self, probe: str, params: dict[str, ParamValue], *, on: Target | None = None
    ) -> Iterator[str]:
        """Run an agent probe on the target (or ``on`` another, e.g. the client end on this
        machine) with this run's shape; header renamed to us."""
        args = ["run", probe, "--runs", "1", "--iterations", str(self.iterations)]
        args += ["--duration", repr(float(self.duration)), "--warmup", str(self.warmup)]
        if self.inv.timeout:
            args += ["--timeout", repr(float(self.inv.timeout))]
        if self.inv.cpus:
            args += ["--cpus", self.inv.cpus]
        for key, val in params.items():
            args += ["--param", f"{key}={_fmt(val)}"]
        if on is None or on is self.target:
            args += self.inv.env_args  # another machine (a client end) has its own TSC
        # An agent elsewhere prints its own machine's boot: the header gets the target's, read
        # here unless the caller read it before it made the target busy (net from-host).
        boot = self.boot_id() if on is not None and on is not self.target else None
        for line in (on or self.target).run_agent(args, self.left()):
            yield self.rename_header(line, boot_id=boot)

    def boot_id(self) -> str | None:
        """The boot the target is in (its kernel's boot id, from an agent run's header there),
        read once per run; None if the target cannot say. Headers built here, or printed by an
        agent on another machine (a client end), name it: else a guest's runs in several boots
        read as one boot, this machine's."""
        if not self._boot:
            args = ["run", "cpuid", "--runs", "1", "--iterations", "2", "--warmup", "0"]
            try:
                lines = list(self.target.run_agent(args + self.inv.env_args, min(self.left(), 60)))
            except VmtaxError:
                lines = []
            self._boot.append(_boot_of(lines))
        return self._boot[0]

    def rename_header(self, line: str, boot_id: str | None = None) -> str:
        """The agent probe's line as the workload's: the header gets the workload's name,
        parameters, unit and direction, samples the workload's unit (an ``exec`` of
        ``openssl speed`` measures MB/s, higher is better, not the probe's ns), and the run
        summary the tool's own throughput where it reported one."""
        compact = line[:64].replace(" ", "")
        if '"type":"run_summary"' in compact and self.workload.throughput_unit:
            # A tool run by ``exec`` that reports its own throughput (sysbench's tx/s) gives
            # it as the summary's ``rate``: it becomes the workload's throughput.
            rec = json.loads(line)
            rate = (rec.get("extra") or {}).get("rate")
            if rate is None:
                return line
            rec["throughput"] = rate
            rec["throughput_unit"] = self.workload.throughput_unit
            return json.dumps(rec) + "\n"
        if '"type":"samples"' in compact:
            if f'"unit":"{self.workload.unit}"' in line[:120].replace(" ", ""):
                return line
            rec = json.loads(line)
            rec["unit"] = self.workload.unit
            return json.dumps(rec) + "\n"
        if '"type":"header"' not in compact:
            return line
        rec = json.loads(line)
        rec["params"] = {"agent_probe": rec["probe"], **rec["params"], **self.params}
        rec["probe"] = self.workload.name
        rec["unit"] = self.workload.unit
        rec["better"] = self.workload.better
        if boot_id is not None:
            rec["boot_id"] = boot_id
        return json.dumps(rec) + "\n"

    def stream(
        self,
        values: Sequence[float] | np.ndarray,
        *,
        wall_s: float,
        warm: Sequence[float] = (),
        throughput: float | None = None,
        extra: dict[str, float] | None = None,
        stopped_by: str = "iterations",
    ) -> Iterator[str]:
        """The stream of one complete run from values the controller measured."""
        import numpy as np  # heavy: numpy, only once a workload has measured (not for doctor)

        yield from self.header()
        vals = np.asarray(values, dtype=np.float64)
        if len(vals) < 2:
            yield self.end(
                f"{self.workload.name}: only {len(vals)} value(s) measured; need at least 2"
            )
            return
        for i in range(0, len(warm), _BATCH):
            yield _line(
                SamplesRecord(
                    type="samples",
                    run=0,
                    unit=self.workload.unit,
                    warmup=True,
                    values=list(map(float, warm[i : i + _BATCH])),
                )
            )
        for i in range(0, len(vals), _BATCH):
            yield _line(
                SamplesRecord(
                    type="samples",
                    run=0,
                    unit=self.workload.unit,
                    values=vals[i : i + _BATCH].tolist(),
                )
            )
        summary = RunSummary(
            type="run_summary",
            run=0,
            n=len(vals),
            mean=float(vals.mean()),
            median=float(np.median(vals)),
            stddev=float(vals.std(ddof=1)),
            min=float(vals.min()),
            max=float(vals.max()),
            p95=float(np.percentile(vals, 95)),
            p99=float(np.percentile(vals, 99)),
            wall_s=wall_s,
            ops_per_sec=len(vals) / wall_s if wall_s > 0 else None,
            throughput=throughput,
            throughput_unit=self.workload.throughput_unit,
            cpus=list(range(os.cpu_count() or 1)),
            stopped_by=stopped_by,  # type: ignore[arg-type]
            extra={k: float(v) for k, v in (extra or {}).items() if np.isfinite(v)},
        )
        yield _line(summary)
        yield _line(End(type="end", status="ok", runs_completed=1))

    def header(self) -> Iterator[str]:
        w = self.workload
        yield _line(
            Header(
                type="header",
                schema=SCHEMA,
                agent_version=self.env().agent_version,
                probe=w.name,
                unit=w.unit,
                better=w.better,  # type: ignore[arg-type]
                throughput_unit=w.throughput_unit,
                mechanism=w.mechanism,
                params=self.params,
                runs=1,
                iterations=self.iterations,
                duration_s=self.duration,
                warmup=self.warmup,
                timeout_s=self.inv.timeout,
                cpus=None,
                started_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                boot_id=self.boot_id(),
                env=self.env(),
            )
        )

    def end(self, error: str) -> str:
        return _line(End(type="end", status="error", error=_one_line(error), runs_completed=0))


def _line(rec: Any) -> str:
    return rec.model_dump_json(by_alias=True, exclude_none=False) + "\n"


def _boot_of(lines: Sequence[str]) -> str | None:
    for line in lines:
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and rec.get("type") == "header":
                boot = rec.get("boot_id")
                return boot if isinstance(boot, str) and boot else None
    return None


def _fmt(v: ParamValue) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --- tools ---------------------------------------------------------------------------------


def tool(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run a client tool to completion and return its stdout; errors are one line."""
    try:
        res = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            check=False,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise WorkloadError(f"{argv[0]} not found (install it)") from None
    except subprocess.TimeoutExpired:
        raise WorkloadError(f"{argv[0]} did not finish in {timeout:g} s") from None
    out = res.stdout.decode("utf-8", "replace")
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace")
        raise WorkloadError(f"{argv[0]} exited with code {res.returncode}: {last_line(err or out)}")
    return out

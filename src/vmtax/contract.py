"""The agent's output contract, ``vmtax.probe/1``: pydantic models and a stream reader.

The Rust agent writes one JSON object per line on stdout:

1. one ``header``;
2. per run, one or more ``samples`` records and then one ``run_summary``;
3. one ``end`` record with a status.

The serde structs in ``probe/src/output.rs`` mirror these models. The shared test vectors in
``tests/vectors/`` keep the two sides equal: both sides parse them, and the Rust tests
validate the agent's real output against ``tests/vectors/schema.json``, which is generated
from these models (``python -m vmtax.contract > tests/vectors/schema.json``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "vmtax.probe/1"
#: The longest boot id accepted (a UUID is 36 characters).
MAX_BOOT_ID = 128
_BOOT_ID = re.compile(rf"[!-~]{{1,{MAX_BOOT_ID}}}")
SCHEMA_MAJOR = 1

Better = Literal["lower", "higher"]
Status = Literal["ok", "error", "timeout", "interrupted"]
ParamValue = bool | int | float | str


class _Model(BaseModel):
    # New optional fields from a newer agent must not break an older controller.
    model_config = ConfigDict(extra="allow")


class Hypervisor(_Model):
    detected: bool
    vendor: str | None = None
    signature: str | None = None
    evidence: list[str] = Field(default_factory=list)


class Nesting(_Model):
    depth: int | None = None
    basis: str
    confidence: Literal["none", "low", "medium", "high"]
    cpuid_cycles: float | None = None


def _absent(value: object) -> bool:
    return value is None


class Cpu(_Model):
    model: str
    vendor: str
    logical_cpus: int
    tsc_hz: float | None = None
    tsc_source: str | None = None
    tsc_invariant: bool | None = None
    virt_flags: list[str] = Field(default_factory=list)
    #: The microcode revision (/proc/cpuinfo ``microcode``, e.g. ``0xf0``). None where the
    #: kernel shows none (many guests) or the agent predates the field; then it is left out
    #: of the JSON, as the agent leaves it out, so an older fingerprint writes back as read.
    microcode: str | None = Field(default=None, exclude_if=_absent)


class Qemu(_Model):
    """The QEMU that runs a guest level, as the controller that booted it knows it (the
    agent inside cannot see it): ``version`` is what ``qemu-system-x86_64 --version`` says
    after "version", e.g. ``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``."""

    version: str


class Fingerprint(_Model):
    agent_version: str
    arch: str
    hostname: str
    hypervisor: Hypervisor
    nesting: Nesting
    cpu: Cpu
    memory_bytes: int
    kernel: str
    clocksource: str | None = None
    thp: str | None = None
    steal_ticks: int | None = None
    #: Written by the controller, never by the agent: the QEMU of a guest level it booted
    #: (``targets.agent.fingerprint``). Left out of the JSON elsewhere (this machine, an SSH
    #: host, a stored fingerprint from before the field).
    qemu: Qemu | None = Field(default=None, exclude_if=_absent)


class ParamInfo(_Model):
    name: str
    default: ParamValue
    help: str
    kind: Literal["int", "float", "bool", "str", "choice"]
    choices: list[str] | None = None


class ProbeInfo(_Model):
    name: str
    summary: str
    mechanism: str
    unit: str
    better: Better
    throughput_unit: str | None = None
    params: list[ParamInfo]
    needs_root: bool
    arches: list[str]


class Header(_Model):
    type: Literal["header"]
    schema_: str = Field(alias="schema")
    agent_version: str
    probe: str
    unit: str
    better: Better
    throughput_unit: str | None = None
    mechanism: str
    params: dict[str, ParamValue]
    runs: int
    iterations: int
    duration_s: float | None = None
    warmup: int
    timeout_s: float | None = None
    cpus: list[int] | None = None
    started_at: str
    # /proc/sys/kernel/random/boot_id; None from agents older than the field or without /proc.
    boot_id: str | None = None
    env: Fingerprint

    @field_validator("boot_id")
    @classmethod
    def _a_sane_boot_id(cls, value: str | None) -> str | None:
        # A kernel's boot id is a UUID; it is stored with every run and shown in tables and
        # reports, so a NUL, a control or bidi character, or a 100,000-character one (a
        # stream that was not the agent's) is refused here, without echoing it.
        if value is not None and not _BOOT_ID.fullmatch(value):
            raise ValueError(
                f"boot_id must be 1 to {MAX_BOOT_ID} printable ASCII characters without "
                f"spaces (a UUID), got {len(value)} characters"
                + ("" if value.isascii() and value.isprintable() else ", some not printable ASCII")
            )
        return value


class Samples(_Model):
    type: Literal["samples"]
    run: int
    unit: str
    warmup: bool = False
    values: list[float]

    @field_validator("values")
    @classmethod
    def _finite_and_not_negative(cls, values: list[float]) -> list[float]:
        # Every probe measures a time, a count or a size: the agent never writes NaN, an
        # infinity or a negative value, and one that got in would break every mean after it.
        import numpy as np  # heavy: numpy, only once samples are read (`vmtax doctor` is not)

        arr = np.asarray(values, dtype=np.float64)
        bad = np.flatnonzero(~(np.isfinite(arr) & (arr >= 0)))
        if bad.size:
            raise ValueError(
                f"values[{bad[0]}] is {values[bad[0]]!r}: samples are finite and not negative"
            )
        return values


class RunSummary(_Model):
    type: Literal["run_summary"]
    run: int
    n: int
    mean: float
    median: float
    stddev: float
    min: float
    max: float
    p95: float
    p99: float
    wall_s: float
    ops_per_sec: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None
    steal_ticks: int | None = None
    cpus: list[int]
    stopped_by: Literal["iterations", "duration"]
    extra: dict[str, float] = Field(default_factory=dict)


class End(_Model):
    type: Literal["end"]
    status: Status
    error: str | None = None
    runs_completed: int


Record = Annotated[Header | Samples | RunSummary | End, Field(discriminator="type")]
_RECORD: TypeAdapter[Header | Samples | RunSummary | End] = TypeAdapter(Record)


def parse_record(line: str) -> Header | Samples | RunSummary | End:
    """Parse one JSONL line; raises ``ValueError`` with a one-line reason."""
    try:
        return _RECORD.validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        msg = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"invalid record at {where}: {msg}") from None


@dataclass
class CompletedRun:
    """One run whose summary arrived: its raw values and warm-up values, in order."""

    summary: RunSummary
    values: np.ndarray
    warmup_values: np.ndarray


@dataclass
class ProbeStream:
    """What was read from one agent invocation, complete or not."""

    header: Header | None = None
    runs: list[CompletedRun] = field(default_factory=list)
    lost_runs: list[int] = field(default_factory=list)
    end: End | None = None
    problem: str | None = None
    #: Runs whose own records were broken, with the first reason (``keep_going`` only).
    broken: dict[int, str] = field(default_factory=dict)
    #: The first samples record whose unit is not the header's (one stream has one unit).
    wrong_unit: str | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None and self.problem is None


def read_stream(lines: Iterable[str | bytes], *, keep_going: bool = False) -> ProbeStream:
    """Read an agent stream, keeping every whole run even when the stream breaks off.

    It never raises for bad content: a malformed, out-of-order or truncated stream sets
    ``problem`` to a one-line reason, and any run that had samples but no summary is listed
    in ``lost_runs``. Callers decide whether that is an error.

    ``keep_going`` reads on past a broken record instead of stopping there (a saved stream
    being imported): the run the record belongs to is listed in ``broken`` and every whole
    run after it is kept. A line that cannot be read names no run; it breaks the run that is
    open (samples, no summary yet), or else the next one to start.
    """
    import numpy as np  # heavy: numpy, only once a stream is read

    out = ProbeStream()
    # A run's samples as the arrays its records gave, joined once its summary comes.
    pending: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    blame_next: str | None = None  # an unreadable line between runs: the next run's record
    whole: set[int] = set()

    def broken(run: int, reason: str) -> None:
        out.broken.setdefault(run, reason)
        out.problem = out.problem or reason

    for lineno, raw in enumerate(lines, start=1):
        fast = _samples_record(raw, np) if out.header is not None and out.end is None else None
        if fast is not None and out.header is not None:  # an agent's samples record, in bulk
            run, unit, warmup, values = fast
            if blame_next is not None:
                broken(run, blame_next)
                blame_next = None
            if unit != out.header.unit:
                other_unit = _wrong_unit(lineno, run, unit, out.header.unit)
                out.wrong_unit = out.wrong_unit or other_unit
                if not keep_going:
                    out.problem = other_unit
                    break
                broken(run, other_unit)
            measured_parts, warm_parts = pending.setdefault(run, ([], []))
            (warm_parts if warmup else measured_parts).append(values)
            continue
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line:
            continue
        if out.end is not None:
            out.problem = f"line {lineno}: data after the end record"
            break
        try:
            rec = parse_record(line)
        except ValueError as exc:
            reason = f"line {lineno}: {exc}"
            if not (keep_going and out.header is not None):
                out.problem = reason
                break
            for run in pending:
                broken(run, reason)
            if not pending:
                blame_next = blame_next or reason
            continue
        if isinstance(rec, Header):
            if out.header is not None:
                out.problem = f"line {lineno}: a second header"
                break
            if not rec.schema_.startswith("vmtax.probe/") or _major(rec.schema_) != SCHEMA_MAJOR:
                out.problem = f"line {lineno}: unsupported schema {rec.schema_!r}"
                break
            out.header = rec
            continue
        if out.header is None:
            out.problem = f"line {lineno}: {rec.type} record before the header"
            break
        if isinstance(rec, (Samples, RunSummary)) and blame_next is not None:
            broken(rec.run, blame_next)
            blame_next = None
        if isinstance(rec, Samples):
            if rec.unit != out.header.unit:
                wrong_unit = _wrong_unit(lineno, rec.run, rec.unit, out.header.unit)
                out.wrong_unit = out.wrong_unit or wrong_unit
                if not keep_going:
                    out.problem = wrong_unit
                    break
                broken(rec.run, wrong_unit)
            measured_parts, warm_parts = pending.setdefault(rec.run, ([], []))
            (warm_parts if rec.warmup else measured_parts).append(
                np.asarray(rec.values, dtype=np.float64)
            )
        elif isinstance(rec, RunSummary):
            measured_parts, warm_parts = pending.pop(rec.run, ([], []))
            measured = _joined(measured_parts, np)
            warm = _joined(warm_parts, np)
            wrong: str | None = None
            if rec.n != len(measured):
                wrong = (
                    f"line {lineno}: run {rec.run} summary says n={rec.n} "
                    f"but {len(measured)} samples arrived"
                )
            elif keep_going and rec.run in whole:
                wrong = f"line {lineno}: a second summary of run {rec.run}"
                out.runs = [r for r in out.runs if r.summary.run != rec.run]
            if wrong is not None:
                if not keep_going:
                    out.problem = wrong
                    break
                broken(rec.run, wrong)
                continue
            if rec.run in out.broken:
                continue
            whole.add(rec.run)
            out.runs.append(CompletedRun(summary=rec, values=measured, warmup_values=warm))
        else:
            out.end = rec
    out.lost_runs = sorted(set(pending) - set(out.broken))
    if out.problem is None and out.end is None:
        out.problem = "stream ended without an end record (agent killed or truncated output)"
        if out.header is None:
            out.problem = "no output from the agent"
    return out


#: The samples record exactly as the agent writes it (probe/src/output.rs): its fields in
#: this order, no spaces. Any other spelling of a samples record, valid or not, is read by
#: ``parse_record`` instead, which says what is wrong with it.
_SAMPLES = re.compile(
    rb'\{"type":"samples","run":(0|[1-9][0-9]{0,17}),"unit":"([A-Za-z0-9_/%.-]{1,64})",'
    rb'"warmup":(true|false),"values":\['
)
#: What a JSON array of numbers holds besides its brackets.
_NUMBER_BYTES = b"0123456789.eE+-,"


def _samples_record(raw: str | bytes, numpy: Any) -> tuple[int, str, bool, np.ndarray] | None:
    """(run, unit, warm-up, values) of one samples line as the agent writes it, or None
    for any other line and for samples that are not all finite and not negative (the
    record's model then says why, as for any record).

    Hand-written: the model reads a list of floats one Python object at a time, a quarter
    of a million samples a second at best; here the values are one JSON array, parsed by
    pydantic's own JSON parser (strict JSON) and checked as one numpy array."""
    if not isinstance(raw, bytes) or not raw.startswith(b'{"type":"samples"'):
        return None
    m = _SAMPLES.match(raw)
    if m is None:
        return None
    array = raw[m.end() - 1 :].rstrip()
    # Numbers alone (no true, null or "1" that numpy would take as 1.0), then strict JSON.
    if not array.endswith(b"]}") or array[1:-2].translate(None, _NUMBER_BYTES):
        return None
    try:
        values = numpy.asarray(pydantic_core.from_json(array[:-1]), dtype=numpy.float64)
    except (ValueError, TypeError, OverflowError):
        return None
    if values.ndim != 1 or not bool((numpy.isfinite(values) & (values >= 0)).all()):
        return None
    return int(m.group(1)), m.group(2).decode("ascii"), m.group(3) == b"true", values


def _wrong_unit(lineno: int, run: int, unit: str, header_unit: str) -> str:
    return (
        f"line {lineno}: run {run}'s samples are in {unit[:40]!r}, the header's unit is "
        f"{header_unit!r}"
    )


def _joined(parts: list[np.ndarray], numpy: Any) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return numpy.concatenate(parts) if parts else numpy.empty(0, dtype=numpy.float64)


def _major(schema: str) -> int:
    try:
        return int(schema.rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return -1


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one record, shared with the Rust tests."""
    schema = _RECORD.json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = SCHEMA
    return schema


def finite(x: float | None) -> float | None:
    """JSON has no NaN: the agent writes null; keep the Python side symmetrical."""
    return None if x is None or not math.isfinite(x) else x


def known_env_args(tsc_hz: float | None) -> list[str]:
    """Agent arguments that give a run what the target's fingerprint already found."""
    return ["--tsc-hz", repr(float(tsc_hz)), "--brief-env"] if tsc_hz else []


def startup_args(tsc_hz: float | None) -> list[str]:
    """A run that is all start-up: what every planned run repeats besides its measuring."""
    args = ["run", "syscall", "--runs", "1", "--iterations", "2", "--warmup", "0"]
    return args + known_env_args(tsc_hz)


#: The unit of a probe that counts TSC ticks (cpuid). Runs stored before the unit had this
#: name say ``cycles``; the store reads them as ``tsc_cycles`` (``Store.runs``).
TSC_UNIT = "tsc_cycles"
LEGACY_TSC_UNITS = frozenset({"cycles"})


def probe_startup_args(args: list[str]) -> list[str]:
    """A planned run's own arguments cut to its start-up: two iterations, no warm-up, no
    duration. Its exits are the probe's set-up (a file it writes, the servers a workload
    starts) plus two iterations, which a run's exits per iteration must not carry."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in ("--iterations", "--warmup", "--duration") and i + 1 < len(args):
            skip = True
            continue
        out.append(arg)
    return [*out[:4], "--iterations", "2", "--warmup", "0", *out[4:]]


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))

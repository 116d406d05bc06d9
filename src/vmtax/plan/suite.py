"""Suites: TOML files that say which probes to run, how often and for how long.

A suite is validated with pydantic; any problem becomes ONE line naming the file and the key,
e.g. ``suite quick.toml: probes[2].runs: Input should be greater than or equal to 1``.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from vmtax import infile
from vmtax.errors import UsageError
from vmtax.limits import parse_seconds
from vmtax.plan import bounds

ParamValue = bool | int | float | str
PositiveInt = Annotated[int, Field(ge=1, le=bounds.MAX_COUNT)]
NonNegativeInt = Annotated[int, Field(ge=0, le=bounds.MAX_COUNT)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# The bounds the agent and the store hold (see plan/bounds.py), refused before anything starts.
Runs = Annotated[int, Field(ge=1, le=bounds.MAX_RUNS)]
Duration = Annotated[float, Field(gt=0, le=bounds.MAX_DURATION_S, allow_inf_nan=False)]
Timeout = Annotated[float, Field(gt=0, le=bounds.MAX_TIMEOUT_S, allow_inf_nan=False)]

#: Byte multipliers for ``scale_to_memory.unit``.
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


class _Strict(BaseModel):
    # A misspelt key is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid")


class MemoryScale(_Strict):
    """Set a parameter (or ``iterations``) from the target's RAM, so a memory test is sized
    to the machine it runs on: ``value = RAM * fraction / unit [/ per_param's value]``, then
    rounded down to a power of two if asked, and clamped to [minimum, maximum].
    """

    param: str
    fraction: Annotated[float, Field(gt=0, le=4)] = 1.0
    unit: str = "MiB"
    per_param: str | None = None
    power_of_two: bool = False
    minimum: NonNegativeInt = 1
    maximum: PositiveInt | None = None

    @model_validator(mode="after")
    def _known_unit(self) -> MemoryScale:
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}")
        return self

    def value(self, memory_bytes: int, params: dict[str, ParamValue] | None = None) -> int:
        """The scaled value for a machine with ``memory_bytes`` of RAM."""
        v = memory_bytes * self.fraction / UNITS[self.unit]
        if self.per_param is not None:
            v /= float((params or {})[self.per_param])
        n = int(v)
        if self.power_of_two and n >= 1:
            n = 1 << (n.bit_length() - 1)
        n = max(n, self.minimum)
        return min(n, self.maximum) if self.maximum is not None else n


class Settings(_Strict):
    """How each run is bounded: whichever of iterations or duration comes first.

    An unset iterations, duration or warmup leaves the probe's own default (see
    ``vmtax probes``) in force; runs and timeout always apply.
    """

    runs: Runs = 3
    iterations: PositiveInt | None = None
    duration: Duration | None = None
    warmup: NonNegativeInt | None = None
    timeout: Timeout = 60.0
    cpus: str | None = None


class Entry(_Strict):
    """One probe with its parameters; ``name`` tells apart two entries of the same probe."""

    probe: Annotated[str, Field(min_length=1)]
    name: str | None = None
    runs: Runs | None = None
    iterations: PositiveInt | None = None
    duration: Duration | None = None
    warmup: NonNegativeInt | None = None
    timeout: Timeout | None = None
    cpus: str | None = None
    params: dict[str, ParamValue] = Field(default_factory=dict)
    scale_to_memory: list[MemoryScale] = Field(default_factory=list)

    @model_validator(mode="after")
    def _scaling_refers_to_known_params(self) -> Entry:
        known = set(self.params)
        for scale in self.scale_to_memory:
            if scale.per_param is not None and scale.per_param not in known:
                raise ValueError(
                    f"scale_to_memory of {scale.param!r}: per_param {scale.per_param!r} "
                    "is not set before it"
                )
            known.add(scale.param)
        return self

    @property
    def key(self) -> str:
        return self.name or self.probe


def parse_percent(value: object) -> float:
    """``"2%"`` or ``2`` -> 0.02: a relative half-width, in (0, 100) percent."""
    text = str(value).strip()
    try:
        pct = float(text.removesuffix("%"))
    except ValueError:
        raise ValueError(f"must be a percentage like 2% or 0.5%, got {text!r}") from None
    if not 0 < pct < 100:
        raise ValueError(f"must be a percentage above 0% and below 100%, got {text!r}")
    return pct / 100.0


class Suite(_Strict):
    """A suite. With ``precision`` set, sampling is adaptive (see docs/statistics.md): each
    probe gets ``min_runs`` runs, then more until its 95% interval's half-width is at most
    ``precision`` of the mean or ``budget`` (wall time of the measuring) is spent; the
    entries' ``runs`` are then unused."""

    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=bounds.MAX_SEED)] | None = None
    precision: float | None = None
    budget: float | None = None
    min_runs: Annotated[int, Field(ge=2)] = 5
    defaults: Settings = Field(default_factory=Settings)
    probes: Annotated[list[Entry], Field(min_length=1)]

    @field_validator("precision", mode="before")
    @classmethod
    def _percent(cls, value: object) -> float | None:
        return None if value is None else parse_percent(value)

    @field_validator("budget", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> float | None:
        return None if value is None else parse_seconds(value)

    @model_validator(mode="after")
    def _unique_names(self) -> Suite:
        seen: set[str] = set()
        for entry in self.probes:
            if entry.key in seen:
                raise ValueError(
                    f"two entries are called {entry.key!r}: give one a distinct `name`"
                )
            seen.add(entry.key)
        return self

    def resolved(self, entry: Entry) -> Settings:
        """The entry's settings with the suite defaults filled in."""
        own = entry.model_dump(include=set(Settings.model_fields), exclude_none=True)
        return self.defaults.model_copy(update=own)


def builtin_names() -> list[str]:
    """The suites shipped inside the package."""
    root = resources.files("vmtax.plan") / "suites"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def _builtin_text(name: str) -> str:
    return (resources.files("vmtax.plan") / "suites" / f"{name}.toml").read_text("utf-8")


def load_suite(name_or_path: str) -> tuple[Suite, str]:
    """Load a built-in suite by name or a user's TOML file by path.

    Returns the suite and where it came from (``builtin:quick`` or the file path).
    Raises ``UsageError`` with one line naming the file and the key.
    """
    looks_like_path = name_or_path.endswith(".toml") or "/" in name_or_path
    if not looks_like_path:
        if name_or_path not in builtin_names():
            raise UsageError(
                f"unknown suite {name_or_path!r}; built-in suites: {', '.join(builtin_names())} "
                "(or pass a path to a .toml file)"
            )
        return parse_suite(_builtin_text(name_or_path), f"{name_or_path}.toml"), (
            f"builtin:{name_or_path}"
        )
    path = Path(name_or_path)
    try:
        text = infile.read_text(path)  # a FIFO with no writer yet: said after a second
    except FileNotFoundError:
        raise UsageError(f"suite file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read suite {path}: {exc}") from None
    return parse_suite(text, str(path)), str(path)


def parse_suite(text: str, source: str) -> Suite:
    """Parse and validate suite TOML; ``source`` names the file in error messages."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"suite {source}: invalid TOML: {_one_line(str(exc))}") from None
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _loc(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        return _raise(f"suite {source}: {where}: {_one_line(msg)}{more}")


def _raise(message: str) -> Suite:
    raise UsageError(message)


def _loc(loc: tuple[int | str, ...]) -> str:
    # ("probes", 2, "runs") -> "probes[2].runs"; union branches like "int" are dropped.
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif (
            part in {"bool", "int", "float", "str"}
            and out.startswith("probes")
            and ".params" in out
        ):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "suite"


def _one_line(text: str) -> str:
    return " ".join(text.split())

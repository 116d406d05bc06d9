"""Callbacks that hold every command's options to the shared limits (``vmtax.limits``).

typer declares an option's type, not its range: ``--seed -1`` or ``--slo nan`` parse fine
and used to break later (a traceback from SQLite, a sweep that never met its objective).
Each callback names the option as typed and refuses its value in one line, exit 2, before
the command's body runs; the same callback serves the same kind of option everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import typer

from vmtax import limits
from vmtax.errors import UsageError
from vmtax.limits import parse_seconds
from vmtax.store import select


def _name(param: typer.CallbackParam) -> str:
    """The option as a user types it (``--order-seed``), or an argument's metavar."""
    long = [o for o in param.opts if o.startswith("--")]
    return max(long, key=len) if long else (param.name or "value").upper()


def path(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """A file's path that the system could name: at most PATH_MAX (4096) bytes, each part at
    most NAME_MAX (255); a longer one failed later as an OSError traceback."""
    if value is None:
        return value
    size = len(os.fsencode(value))
    longest = max((len(os.fsencode(part)) for part in value.split("/")), default=0)
    if size >= 4096 or longest > 255:
        raise UsageError(
            f"{_name(param)} is not a path this system can open: {size} bytes"
            + (f", a part of {longest}" if longest > 255 else "")
            + " (at most 4095, each part at most 255)"
        )
    return value


def seed(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
    """A seed: 0..2^63-1, the range run and sweep stored first."""
    limits.check_seed(value, _name(param))
    return value


def exp_id(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
    """An experiment id given as a number: 1..2^63-1."""
    limits.check_id(value, _name(param))
    return value


def experiment(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """An experiment given as an id, ``latest``, ``exp=N`` or ``exp=latest``: an id is held
    to 1..2^63-1 and anything else (``-5``, ``1.5``) is refused here, before the command
    opens a store (which would say a missing store first)."""
    if value is not None:
        text = value.strip().lower().removeprefix("exp=")
        if text.isascii() and text.isdigit():
            limits.id_text(text, "an experiment id")
        elif text != "latest":
            raise UsageError(
                f"{_name(param)} must be an experiment id (1..{limits.MAX_ID}) or latest, "
                f"got {value[:60]!r}"
            )
    return value


def resamples(low: int) -> Callable[..., Any]:
    """Resamples of a test or bootstrap: ``low``..MAX_RESAMPLES."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
        limits.check_int(value, _name(param), low, limits.MAX_RESAMPLES)
        return value

    return check


def count(low: int, high: int) -> Callable[..., Any]:
    """An integer in ``low..high``."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
        limits.check_int(value, _name(param), low, high)
        return value

    return check


def seconds(bound: float) -> Callable[..., Any]:
    """A positive, finite number of seconds at most ``bound``."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
        limits.check_seconds(value, _name(param), bound)
        return value

    return check


def finite(low: float, high: float) -> Callable[..., Any]:
    """A finite number in ``[low, high]`` (NaN and the infinities never pass)."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
        limits.check_finite(value, _name(param), low, high)
        return value

    return check


def budget(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """A duration like 60s or 5m, at most a week (as --timeout): the whole command's bound."""
    if value is not None:
        try:
            secs = parse_seconds(value)
        except ValueError as exc:
            raise UsageError(f"{_name(param)} {exc}") from None
        limits.check_seconds(secs, _name(param), limits.MAX_BUDGET_S)
    return value


def nonempty(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A text (or each of a repeatable option's texts) that is not blank, nor a list of
    blanks: ``--levels ''`` or ``--levels ,`` must not fall back to a default silently."""
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if item is not None and not [p for p in str(item).split(",") if p.strip()]:
            raise UsageError(f"{_name(param)} must not be empty")
    return value


def fraction(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """A share in [0, 1), e.g. a noise band."""
    if value is not None and not (0 <= value < 1):  # NaN fails both comparisons
        raise UsageError(f"{_name(param)} must be a fraction in [0, 1), got {value:g}")
    return value


def selectors(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """Selectors parse before any store is opened: a malformed one, or an id past the store's
    integers, is bad input whether or not the store exists."""
    for text in value if isinstance(value, list | tuple) else [value]:
        if text is not None:
            select.parse(text)
    return value


def level(low: int, high: int) -> Callable[..., Any]:
    """A level label L<low>..L<high>: vmtax nests at most three deep (L0 to L3)."""
    names = [f"L{n}" for n in range(low, high + 1)]

    def check(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
        if value is not None and value.strip().upper() not in names:
            listed = f"{', '.join(names[:-1])} or {names[-1]}"
            raise UsageError(f"{_name(param)} must be {listed}, got {value!r}")
        return value

    return check


#: compare's and report's --boot-cost: one declaration, so both hold the same limits and text.
BootCost = Annotated[
    float,
    typer.Option(
        "--boot-cost",
        callback=seconds(limits.MAX_TIMEOUT_S),
        help="What one boot of a guest costs, in seconds, for the runs per boot that "
        "Kalibera and Jones' formula picks.",
    ),
]

#: run's --boot-cost: the same limits and text, None when not given (it needs --levels).
RunBootCost = Annotated[
    float | None,
    typer.Option(
        "--boot-cost",
        callback=seconds(limits.MAX_TIMEOUT_S),
        help="What one boot of a guest costs, in seconds (default 60), for the runs per boot "
        "that Kalibera and Jones' formula picks; needs a guest level (--levels).",
    ),
]

#: compare's and report's --by: a label whose values are compared, pooled, hosts the unit.
By = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Compare the values of this label instead of configurations, e.g. --by group: "
        "an inventory's groups, each pooling its hosts, with hosts as the unit.",
    ),
]

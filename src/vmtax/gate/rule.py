"""What fails the gate, parsed from the command's options: light (no pandas), since the
command's option callbacks import it when the CLI loads."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from vmtax.errors import UsageError

#: The exit code of a gate that trips. 1 is a failure at run time and 2 bad input, so a CI job
#: tells "the tax went up" from "the comparison did not run" (as asv and pytest keep distinct
#: codes for a failed check and a broken run).
EXIT_TRIPPED = 3

#: The words --fail-on takes, and the verdicts each one fails on.
WORDS: dict[str, frozenset[str]] = {
    "slower": frozenset({"slower"}),
    "faster": frozenset({"faster"}),
    "any": frozenset({"slower", "faster"}),
}

#: The largest tolerance accepted: an overhead ratio past a million is a typo.
MAX_TOLERANCE = 1e6


def verdicts(values: Iterable[str] | None) -> frozenset[str]:
    """The verdicts that fail the gate, from --fail-on's values: each value may be a comma
    list (``--fail-on slower,faster`` is ``--fail-on slower --fail-on faster``)."""
    out: set[str] = set()
    for value in values or ():
        parts = [p.strip().lower() for p in str(value).split(",")]
        if not any(parts):
            raise UsageError("--fail-on must not be empty (slower, faster or any)")
        for part in parts:
            if not part:
                continue
            if part not in WORDS:
                raise UsageError(
                    f"--fail-on: unknown verdict {part!r} (choose from {', '.join(WORDS)})"
                )
            out |= WORDS[part]
    return frozenset(out)


def check_tolerance(value: float | None, what: str = "--max-overhead") -> None:
    """A tolerance is an overhead ratio: finite, at least 1 (1.10 = 10% slower)."""
    if value is not None and not (math.isfinite(value) and 1.0 <= value <= MAX_TOLERANCE):
        raise UsageError(
            f"{what} must be an overhead ratio in [1, {MAX_TOLERANCE:g}] (e.g. 1.10 for 10% "
            f"slower), got {value:g}"
        )


@dataclass(frozen=True)
class Rule:
    """What fails the gate: a verdict in ``fail_on``, or an interval wholly above
    ``max_overhead``. An empty rule (neither) is no gate at all."""

    fail_on: frozenset[str] = frozenset()
    max_overhead: float | None = None

    def __post_init__(self) -> None:
        unknown = self.fail_on - WORDS["any"]
        if unknown:
            raise UsageError(f"--fail-on: unknown verdict {sorted(unknown)[0]!r}")
        check_tolerance(self.max_overhead)

    @property
    def active(self) -> bool:
        return bool(self.fail_on) or self.max_overhead is not None

    def describe(self) -> str:
        """The rule as the options that made it, e.g. ``--fail-on slower --max-overhead 1.1``."""
        parts = []
        if self.fail_on:
            word = "any" if self.fail_on == WORDS["any"] else next(iter(self.fail_on))
            parts.append(f"--fail-on {word}")
        if self.max_overhead is not None:
            parts.append(f"--max-overhead {self.max_overhead:g}")
        return " ".join(parts)

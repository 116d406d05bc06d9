"""How a comparison is made, as one value: kept apart from ``stats.compare`` (scipy and
statsmodels) so the commands can build it without loading them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from vmtax import limits
from vmtax.errors import UsageError

#: The two-sample tests and the p-value adjustments a comparison can use.
TESTS = ("permutation", "welch", "mannwhitney")
ADJUSTMENTS = ("holm", "bh", "none")
#: The cost of one boot in Kalibera and Jones' runs per boot when none is given: an emulated
#: L1 came up in 36-77 s on a loaded 2-core machine (docs/levels.md).
BOOT_COST_S = 60.0
#: A label's name, as --by names one.
_LABEL_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: The fewest resamples a comparison takes, as compare's and report's --resamples.
MIN_RESAMPLES = 100


@dataclass(frozen=True)
class CompareOptions:
    """How a comparison is made, checked once when built and passed whole from the command
    to ``stats.compare.compare``: the test, the p-value adjustment across the family, the
    noise band of the verdict, the resamples and seed of the permutation test, what one
    boot costs (for Kalibera and Jones' runs per boot), and ``by``: a label whose values are
    compared instead of configurations (``group``: an inventory's groups, each a pool of
    hosts, with hosts as the unit). Bad values raise UsageError in one line."""

    test: str = "permutation"
    adjust: str = "holm"
    noise: float = 0.02
    resamples: int = 10_000
    seed: int = 0
    boot_cost_s: float = BOOT_COST_S
    by: str | None = None

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise UsageError(f"unknown test {self.test!r} (choose from {', '.join(TESTS)})")
        if self.adjust not in ADJUSTMENTS:
            raise UsageError(
                f"unknown adjustment {self.adjust!r} (choose from {', '.join(ADJUSTMENTS)})"
            )
        if not 0 <= self.noise < 1:  # NaN fails both comparisons
            raise UsageError(f"noise must be a fraction in [0, 1), got {self.noise}")
        limits.check_int(self.resamples, "resamples", MIN_RESAMPLES, limits.MAX_RESAMPLES)
        limits.check_seed(self.seed, "seed")
        limits.check_seconds(self.boot_cost_s, "boot cost", limits.MAX_TIMEOUT_S)
        if self.by is not None and not _LABEL_KEY.fullmatch(self.by):
            raise UsageError(f"--by takes a label's name (letters, digits, _ - .), got {self.by!r}")


class RunStatistic(StrEnum):
    """Which value of each run a history or a model lays out: its iteration mean (what
    `vmtax compare` compares by default), or its median, which a run stalled for a moment by
    a busy machine moves far less."""

    MEAN = "mean"
    MEDIAN = "median"

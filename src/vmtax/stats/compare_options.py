"""How a comparison is made, as one value: kept apart from ``stats.compare`` (scipy and
statsmodels) so the commands can build it without loading them."""

from __future__ import annotations

from dataclasses import dataclass

from vmtax import limits
from vmtax.errors import UsageError

#: The two-sample tests and the p-value adjustments a comparison can use.
TESTS = ("permutation", "welch", "mannwhitney")
ADJUSTMENTS = ("holm", "bh", "none")
#: The cost of one boot in Kalibera and Jones' runs per boot when none is given: an emulated
#: L1 came up in 36-77 s on a loaded 2-core machine (docs/levels.md).
BOOT_COST_S = 60.0
#: The fewest resamples a comparison takes, as compare's and report's --resamples.
MIN_RESAMPLES = 100


@dataclass(frozen=True)
class CompareOptions:
    """How a comparison is made, checked once when built and passed whole from the command
    to ``stats.compare.compare``: the test, the p-value adjustment across the family, the
    noise band of the verdict, the resamples and seed of the permutation test, and what one
    boot costs (for Kalibera and Jones' runs per boot). Bad values raise UsageError in one
    line."""

    test: str = "permutation"
    adjust: str = "holm"
    noise: float = 0.02
    resamples: int = 10_000
    seed: int = 0
    boot_cost_s: float = BOOT_COST_S

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

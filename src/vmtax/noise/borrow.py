"""Borrowed strength: a small experiment's boot-level variance pooled with a noise profile's.

An experiment with ``k`` boots of ``m`` runs each has ``k − 1`` degrees of freedom for the
variance of its boot means, one or two at the default three boots: its t quantile is 12.7 or
4.3, and its interval is too wide to use. A profile of the same machine and configuration
estimates the same variance, ``between + within / m`` (``Components.boot_mean``), with
Satterthwaite's ``df_p`` degrees of freedom. When both estimate one variance they pool as two
independent mean squares do:

    v = ((k − 1) s² + df_p v_p) / (k − 1 + df_p),   with  k − 1 + df_p  degrees of freedom.

Whether they estimate one variance is tested first: ``F = s² / v_p`` has the F distribution
with ``(k − 1, df_p)`` degrees of freedom when they do. When the experiment's boots vary more
than the profile's (one-sided: F's upper tail below :data:`ALPHA_TEST`) the profile no longer
applies (the machine, its load or the guest changed) and the experiment's own ``s²`` with
``k − 1`` degrees of freedom is used. One-sided, because a profile that overstates the
variance only widens the interval, while one that understates it makes the interval too
narrow; and at 0.10, not 0.05, because at three boots the test has little power. A two-sided
test covered less with the profile right (0.938, not 0.95): it swapped the pooled variance
for the experiment's own whenever that came out small, which is when the own one is wrong.
Coverage with the profile right and off by 2× either way is simulated in
``tests/test_noise.py`` and given in docs/statistics.md.

With one boot (``k = 1``) there is nothing to test: the profile's variance is the only one,
with its own degrees of freedom, and the result says that it was not tested.

`stats.intervals.side_log_variance` calls :func:`pool` for a side measured in boots, with
the profile's ``(variance, df)`` for boots of that side's runs
(``stats.boots.ExternalBetween.boot_mean``, the arithmetic of ``Components.boot_mean``): the
result's ``variance`` replaces the side's own variance of one boot mean, and ``df`` its
degrees of freedom (``k − 1``, or Satterthwaite's for unequal boots). Its coverage through
``stats.intervals.boot_ratio_interval`` is simulated in ``tests/test_borrow_coverage.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The level of the F-test that decides whether the profile still applies.
ALPHA_TEST = 0.10


@dataclass(frozen=True)
class Borrowed:
    """The variance of one log boot mean to use, its degrees of freedom, and why."""

    variance: float
    df: float
    used_profile: bool
    f: float  # s² / v_p; NaN with one boot
    p: float  # the F-test's one-sided p-value; NaN with one boot
    reason: str
    alpha: float = ALPHA_TEST  # the F-test's level


def f_test(own: float, df_own: float, profile: float, df_profile: float) -> tuple[float, float]:
    """``(F, p)`` of the experiment's variance ``own`` against the profile's: the one-sided
    p-value of the experiment's boots varying more than the profile says."""
    from scipy import stats  # heavy: scipy, only where a profile is borrowed from

    if not (df_own > 0 and df_profile > 0 and profile > 0 and own >= 0):
        return math.nan, math.nan
    f = own / profile
    return f, float(stats.f.sf(f, df_own, df_profile))


def pool(
    own: float,
    df_own: float,
    profile_variance: float,
    profile_df: float,
    *,
    alpha: float = ALPHA_TEST,
) -> Borrowed:
    """The experiment's own variance of one boot mean, ``own`` with ``df_own`` degrees of
    freedom, pooled with the profile's ``(profile_variance, profile_df)`` for boots of the
    same runs after the one-sided F-test (see the module's docstring); the own estimate when
    the test says the profile no longer applies, or when either is not usable."""
    usable = math.isfinite(profile_variance) and profile_variance > 0 and profile_df > 0
    if not (usable and df_own > 0 and math.isfinite(own) and own >= 0):
        return Borrowed(own, df_own, False, math.nan, math.nan, "no usable profile")
    f, p = f_test(own, df_own, profile_variance, profile_df)
    if p < alpha:
        return Borrowed(
            own, df_own, False, f, p,
            f"this experiment's boots vary {f:.2g}× the profile's (F = {f:.3g}, p = {p:.2g} "
            f"< {alpha:g}): the profile no longer applies, its own estimate is used", alpha,
        )  # fmt: skip
    pooled = (df_own * own + profile_df * profile_variance) / (df_own + profile_df)
    return Borrowed(
        pooled, df_own + profile_df, True, f, p,
        f"pooled with the profile (F-test p = {p:.2g}: a larger variance not detected)", alpha,
    )  # fmt: skip


def borrow(
    log_boot_means: np.ndarray,
    profile_variance: float,
    profile_df: float,
    *,
    alpha: float = ALPHA_TEST,
) -> Borrowed:
    """The variance of one log boot mean from this experiment's boot means, pooled with the
    profile's ``(profile_variance, profile_df)`` for boots of the same runs (see the
    module's docstring). ``log_boot_means``: one per boot, each the mean of the log run
    means of one boot (or the log of its mean of run values, as the interval uses)."""
    y = np.asarray(log_boot_means, dtype=np.float64)
    y = y[np.isfinite(y)]
    k = int(y.size)
    usable = math.isfinite(profile_variance) and profile_variance > 0 and profile_df > 0
    own = float(y.var(ddof=1)) if k >= 2 else math.nan
    if not usable:
        return Borrowed(own, float(k - 1), False, math.nan, math.nan, "no usable profile")
    if k < 2:
        return Borrowed(
            profile_variance, profile_df, True, math.nan, math.nan,
            "one boot: the profile's between-boot variance, not tested",
        )  # fmt: skip
    return pool(own, float(k - 1), profile_variance, profile_df, alpha=alpha)


def log_mean_interval(
    log_boot_means: np.ndarray, borrowed: Borrowed, confidence: float = 0.95
) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of a configuration's log mean from its boot means, with the
    variance and degrees of freedom of ``borrowed``."""
    y = np.asarray(log_boot_means, dtype=np.float64)
    y = y[np.isfinite(y)]
    centre = float(y.mean())
    if not (borrowed.df > 0 and math.isfinite(borrowed.variance)):
        return centre, math.nan, math.nan
    from scipy import stats  # heavy: scipy, only where a profile is borrowed from

    half = float(stats.t.ppf(0.5 + confidence / 2, borrowed.df)) * math.sqrt(
        borrowed.variance / y.size
    )
    return centre, centre - half, centre + half

"""Brent's root finder as ``scipy.optimize.brentq`` runs it, without importing
``scipy.optimize``.

``scipy.optimize`` costs about half a second of CPU to import (it loads its linear
programming solvers, scipy.sparse and scipy.linalg), and a comparison at the boot level needed
it only for the few roots of the Behrens–Fisher quantile table
(:func:`vmtax.stats.intervals.behrens_fisher_quantile`). This is the same algorithm (Brent
1973, in the form of scipy's ``Zeros/brentq.c``: inverse quadratic extrapolation with a
bisection fallback) with scipy's default tolerances, step for step in the same double
arithmetic, so the roots are scipy's to the last bit; ``tests/test_stats_dist.py`` checks
that against ``scipy.optimize.brentq``.
"""

from __future__ import annotations

from collections.abc import Callable

#: scipy.optimize.brentq's defaults: an absolute and a relative tolerance, and its iterations.
XTOL = 2e-12
RTOL = 4 * 2.220446049250313e-16
MAXITER = 100


def brentq(
    f: Callable[[float], float],
    a: float,
    b: float,
    *,
    xtol: float = XTOL,
    rtol: float = RTOL,
    maxiter: int = MAXITER,
) -> float:
    """A root of ``f`` in ``[a, b]``, where ``f(a)`` and ``f(b)`` differ in sign, as
    ``scipy.optimize.brentq(f, a, b)`` finds it. Raises ValueError when they do not differ
    in sign, or when the root is not found within ``maxiter`` steps (as scipy does)."""
    xpre, xcur = float(a), float(b)
    fpre, fcur = float(f(xpre)), float(f(xcur))
    if fpre * fcur > 0:
        raise ValueError("f(a) and f(b) must have different signs")
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre * fcur < 0:
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            # the best estimate so far becomes the current point
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # the secant through the two points
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # inverse quadratic extrapolation through all three
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = float(f(xcur))
    raise ValueError(f"no root within {maxiter} iterations")

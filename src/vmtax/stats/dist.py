"""The t, chi-square and F quantiles and tails the comparison needs, and the binomial tail
the report's period test needs, from ``scipy.special``.

``scipy.stats`` costs most of a second of CPU to import (it builds the docstrings of a hundred
distributions and loads scipy.spatial, scipy.sparse and scipy.optimize), and every ``vmtax
compare`` paid it for a few t quantiles. Its distributions compute these
with the special functions below: ``t.cdf`` is ``stdtr``, ``t.ppf`` is ``stdtrit``,
``chi2.ppf`` is ``2 * gammaincinv(df / 2, q)`` and ``f.ppf`` is ``fdtri``. These functions
call them directly, with ``scipy.stats``' answers at the edges (``q`` of 0 or 1, degrees of
freedom that are not positive), so the numbers are the same (``tests/test_stats_dist.py``
checks them against ``scipy.stats``, bit for bit). The binomial tail is cephes' ``bdtrc``,
where ``scipy.stats`` now calls Boost's: equal to about 1e-15 of the value, not bit for bit.
Whatever needs more than these (a permutation test, a rank test) still imports
``scipy.stats``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

#: What the functions take: a float or an array of them. They give what scipy.stats gives:
#: a numpy scalar for scalars, an array otherwise (``Any``, as scipy.stats' own are typed).
Real = float | np.ndarray

_LOG_PI = np.log(np.pi)
_NORM_PDF_C = np.sqrt(2 * np.pi)


def _out(value: np.ndarray) -> Any:  # noqa: ANN401 - a numpy scalar or an array
    # scipy.stats returns a numpy scalar for scalar input, an array otherwise.
    return value[()] if value.ndim == 0 else value


def _quantile(q: Real, valid: np.ndarray, inner: np.ndarray, low: float, high: float) -> np.ndarray:
    """``scipy.stats``' ``ppf`` around a special function's values ``inner``: ``low`` and
    ``high`` (the support's ends) at q = 0 and 1, NaN outside [0, 1] or where the
    parameters are not ``valid``."""
    q = np.asarray(q, dtype=np.float64)
    out = np.where((q > 0) & (q < 1), inner, np.nan)
    out = np.where(q == 0, low, out)
    out = np.where(q == 1, high, out)
    return np.where(valid, out, np.nan)


def t_ppf(q: Real, df: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.t.ppf(q, df)``."""
    q, df = np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return _out(_quantile(q, df > 0, special.stdtrit(df, q), -np.inf, np.inf))


def t_cdf(x: Real, df: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.t.cdf(x, df)``."""
    x, df = np.asarray(x, dtype=np.float64), np.asarray(df, dtype=np.float64)
    return _out(np.where(df > 0, special.stdtr(df, x), np.nan))


def t_sf(x: Real, df: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.t.sf(x, df)``."""
    x, df = np.asarray(x, dtype=np.float64), np.asarray(df, dtype=np.float64)
    return _out(np.where(df > 0, special.stdtr(df, -x), np.nan))


def t_pdf(x: Real, df: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.t.pdf(x, df)``: its own formula, ``exp`` of the log density (the normal
    density for infinite ``df``), 0 at ±∞."""
    x, df = np.asarray(x, dtype=np.float64), np.asarray(df, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        finite = np.exp(
            np.log(special.poch(0.5 * df, 0.5))
            - 0.5 * (np.log(df) + _LOG_PI)
            - (df + 1) / 2 * np.log1p(x * x / df)
        )
        dens = np.where(df == np.inf, np.exp(-(x**2) / 2.0) / _NORM_PDF_C, finite)
    dens = np.where(np.isinf(x), 0.0, dens)
    return _out(np.where((df > 0) & ~np.isnan(x), dens, np.nan))


def chi2_ppf(q: Real, df: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.chi2.ppf(q, df)``."""
    q, df = np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        inner = 2 * special.gammaincinv(df / 2, q)
    return _out(_quantile(q, df > 0, inner, 0.0, np.inf))


def f_ppf(q: Real, dfn: Real, dfd: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.f.ppf(q, dfn, dfd)``."""
    q = np.asarray(q, dtype=np.float64)
    dfn, dfd = np.asarray(dfn, dtype=np.float64), np.asarray(dfd, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        inner = special.fdtri(dfn, dfd, q)
    return _out(_quantile(q, (dfn > 0) & (dfd > 0), inner, 0.0, np.inf))


def binom_sf(k: Real, n: Real, p: Real) -> Any:  # noqa: ANN401 - as scipy.stats'
    """``scipy.stats.binom.sf(k, n, p)`` for a finite ``n``: cephes' ``bdtrc`` at whole
    ``k``, 1 below 0 and 0 from ``n`` on (where bdtrc's domain ends). scipy.stats now calls
    Boost's survival function instead; the two agree to about 1e-15 of the value, not bit
    for bit."""
    k, n, p = (np.asarray(v, dtype=np.float64) for v in (k, n, p))
    k = np.floor(k)
    valid = (n >= 0) & np.isfinite(n) & (n == np.floor(n)) & (p >= 0) & (p <= 1)
    # A whole n, as an integer: bdtrc's loop for a float n is deprecated (and warns).
    n_ok = np.where(valid, n, 0.0).astype(np.int64)
    with np.errstate(invalid="ignore"):
        inner = special.bdtrc(np.clip(k, -1, np.maximum(n_ok - 1, -1)), n_ok, p)
    out = np.where(k < 0, 1.0, np.where(k >= n, 0.0, inner))
    return _out(np.where(valid & ~np.isnan(k), out, np.nan))


def sem(x: np.ndarray) -> float:
    """``scipy.stats.sem(x)`` of a 1-d array: the standard deviation (n − 1) over √n."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.std(x, ddof=1) / x.size**0.5)


def t_interval(confidence: float, df: Real, loc: Real, scale: Real) -> tuple[Any, Any]:
    """``scipy.stats.t.interval(confidence, df, loc=loc, scale=scale)``, for ``scale > 0``."""
    q1, q2 = (1.0 - confidence) / 2, (1.0 + confidence) / 2
    return t_ppf(q1, df) * scale + loc, t_ppf(q2, df) * scale + loc

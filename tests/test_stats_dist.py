"""vmtax.stats.dist gives scipy.stats' numbers, bit for bit (the binomial tail to 1e-13 of
the value), without importing scipy.stats."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from vmtax.stats import dist

pytestmark = pytest.mark.fast

EDGES = np.array([0.0, 1.0, -0.1, 1.1, np.nan, 1e-300, 1 - 1e-16])
DFS = np.array([0.0, -1.0, 0.5, 1.0, 2.0, 3.0, 5.5, 29.0, 1e9, np.inf, np.nan])


def same(a: object, b: object) -> bool:
    """Equal bit for bit (NaN equal to NaN), and of the same shape."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@pytest.fixture
def quantiles():
    rng = np.random.default_rng(11)
    return np.concatenate([EDGES, rng.uniform(size=200), [0.025, 0.975, 0.5]])


@pytest.fixture
def points():
    rng = np.random.default_rng(12)
    return np.concatenate([[-np.inf, np.inf, np.nan, 0.0, -0.0], rng.standard_t(2, 300) * 5])


def test_t_quantiles_are_scipy_stats(quantiles):
    q, df = np.meshgrid(quantiles, DFS)
    assert same(dist.t_ppf(q, df), stats.t.ppf(q, df))
    for one in (0.975, 0.5, 0.0, 1.0):
        for d in (1, 4, 7.3):
            got, want = dist.t_ppf(one, d), stats.t.ppf(one, d)
            assert same(got, want) and type(got) is type(want)


def test_t_tails_and_density_are_scipy_stats(points):
    x, df = np.meshgrid(points, DFS)
    assert same(dist.t_cdf(x, df), stats.t.cdf(x, df))
    assert same(dist.t_sf(x, df), stats.t.sf(x, df))
    assert same(dist.t_pdf(x, df), stats.t.pdf(x, df))
    # one point at a time, as a quadrature asks for it
    for xi in points[:60]:
        assert same(dist.t_pdf(xi, 5), stats.t.pdf(xi, 5))
        assert same(dist.t_sf(xi, 3), stats.t.sf(xi, 3))


def test_chi2_and_f_quantiles_are_scipy_stats(quantiles):
    q, df = np.meshgrid(quantiles, DFS)
    assert same(dist.chi2_ppf(q, df), stats.chi2.ppf(q, df))
    q3, dfn, dfd = np.meshgrid(quantiles[::7], DFS, DFS)
    assert same(dist.f_ppf(q3, dfn, dfd), stats.f.ppf(q3, dfn, dfd))
    assert same(dist.f_ppf(0.975, 2, 5), stats.f.ppf(0.975, 2, 5))


def test_binomial_tails_are_scipy_stats_to_the_last_digits():
    # Boost's tail in scipy.stats, cephes' here: equal to 1e-13 of the value (or both below
    # the smallest normal double), and alike at the ends (below 0, from n on) and where n or p
    # is not one.
    k = np.arange(-2.0, 45.0)[:, None, None] + np.array([0.0, 0.5])[None, None, :]
    n = np.array([0.0, 1.0, 3.0, 7.0, 8.0, 40.0, -1.0, 2.5, np.nan])[None, :, None]
    for p in (0.0, 1e-9, 0.01, 0.2, 0.5, 0.999, 1.0, -0.1, 1.5, np.nan):
        ours, theirs = dist.binom_sf(k, n, p), stats.binom.sf(k, n, p)
        np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-300, equal_nan=True)
        assert np.array_equal(np.isnan(ours), np.isnan(theirs))


def test_importing_it_leaves_scipy_stats_out():
    code = "import sys, vmtax.stats.dist; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sem_and_t_interval_are_scipy_stats():
    rng = np.random.default_rng(13)
    for n in (2, 3, 6, 40):
        x = rng.lognormal(3, 1, n)
        sem = dist.sem(x)
        assert sem == stats.sem(x)
        got = dist.t_interval(0.95, n - 1, loc=float(x.mean()), scale=sem)
        want = stats.t.interval(0.95, n - 1, loc=float(x.mean()), scale=sem)
        assert got == want

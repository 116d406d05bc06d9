"""The model's intervals: the delta method over independent groups of runs, with t quantiles at
Welch–Satterthwaite's degrees of freedom, vectorised over a leading axis of trials.

A group is an array of shape (trials, runs, k): one row per run (the independent unit), k
quantities per run that were measured together (a profile's exits and handling time). Every
quantity of the model is a smooth function of the group means; its variance is the sum over
groups of ``g' S g / n`` (g: the gradient in that group's means, by central differences; S:
the group's sample covariance). A parameter's interval is the estimate ± t·se; a prediction's
is on the log scale (a time stays positive, and the spread of a run is relative) with one
future run's variance added, ``log(1 + cv²)`` of the runs at the level it extends, n − 1
degrees of freedom.

``vmtax.stats.delta`` does the same for one set of groups; this one takes a trials axis so
that the coverage simulations in CI (tests/test_model_coverage.py) run the very code
``vmtax model`` runs, thousands of trials at once, and it differentiates every quantity the
model computes in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vmtax.stats import dist

CONFIDENCE = 0.95
_STEP = 1e-6  # relative step of the central differences


@dataclass(frozen=True)
class Linearised:
    """Each quantity's estimate (trials,) and its variance parts: per group, the variance
    (trials,) and that group's degrees of freedom (runs − 1)."""

    estimate: dict[str, np.ndarray]
    parts: dict[str, dict[str, tuple[np.ndarray, int]]]
    #: the quantity depends on a group of one run: its spread is unknown
    unknown: dict[str, np.ndarray]


def group_means(groups: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each group's mean over its runs: (trials,) for one quantity a run, else (trials, k)."""
    return {name: _squeeze(g.mean(axis=1)) for name, g in groups.items()}


def _squeeze(x: np.ndarray) -> np.ndarray:
    return x[:, 0] if x.shape[1] == 1 else x


def linearise(
    evaluate: Callable[[dict[str, np.ndarray]], dict], groups: dict[str, np.ndarray]
) -> Linearised:
    """Every array-valued quantity ``evaluate(means)`` returns, with its delta-method variance
    parts. ``groups`` maps names to (trials, runs, k) arrays."""
    base = {name: g.mean(axis=1) for name, g in groups.items()}
    point = _arrays(evaluate({n: _squeeze(m) for n, m in base.items()}))
    parts: dict[str, dict[str, tuple[np.ndarray, int]]] = {key: {} for key in point}
    unknown = {key: np.zeros(v.shape, dtype=bool) for key, v in point.items()}
    for name, g in groups.items():
        n = g.shape[1]
        k = g.shape[2]
        grads = {key: np.zeros((v.shape[0], k)) for key, v in point.items()}
        for j in range(k):
            step = _STEP * np.maximum(np.abs(base[name][:, j]), 1e-12)
            up, down = base[name].copy(), base[name].copy()
            up[:, j] += step
            down[:, j] -= step
            hi = _arrays(evaluate({**_sq(base), name: _squeeze(up)}))
            lo = _arrays(evaluate({**_sq(base), name: _squeeze(down)}))
            for key in point:
                grads[key][:, j] = (hi[key] - lo[key]) / (2 * step)
        if n < 2:
            for key, grad in grads.items():
                unknown[key] |= np.any(grad != 0, axis=1)
            continue
        centred = g - g.mean(axis=1, keepdims=True)
        cov = np.einsum("tnk,tnl->tkl", centred, centred) / (n - 1)
        for key, grad in grads.items():
            var = np.einsum("tk,tkl,tl->t", grad, cov, grad) / n
            if np.any(var > 0):
                parts[key][name] = (var, n - 1)
    return Linearised(point, parts, unknown)


def _sq(base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {n: _squeeze(m) for n, m in base.items()}


def _arrays(out: dict) -> dict[str, np.ndarray]:
    return {
        k: np.asarray(v, dtype=np.float64)
        for k, v in out.items()
        if isinstance(v, np.ndarray) and v.ndim == 1
    }


def future_run(name: str, groups: dict[str, np.ndarray]) -> tuple[str, np.ndarray, int]:
    """One future run like group ``name``'s: (name, its variance on the log scale
    ``log(1 + cv²)``, its degrees of freedom), from the group's (trials, runs) run means."""
    runs = groups[name][:, :, 0]
    n = runs.shape[1]
    if n < 2:
        return name, np.zeros(runs.shape[0]), 0
    cv = runs.std(axis=1, ddof=1) / np.abs(runs.mean(axis=1))
    return name, np.log1p(cv * cv), n - 1


def interval(
    lin: Linearised,
    key: str,
    *,
    log: bool = False,
    future: tuple[str, np.ndarray, int] | None = None,
    confidence: float = CONFIDENCE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, low, high) of one quantity, each (trials,). ``log``: the interval of a
    positive quantity, on the log scale. ``future`` = (group, log variance, dof) adds one
    future run like that group's (a prediction interval). Without any spread (one figure a
    cell) low = high = estimate; with a needed group of one run, NaN."""
    est = lin.estimate[key]
    by_group = dict(lin.parts[key])
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            by_group = {g: (v / (est * est), dof) for g, (v, dof) in by_group.items()}
    if future is not None and future[2] > 0:
        # The future run's spread is estimated from the same runs as that group's share of
        # the estimate's: one variance estimate, its degrees of freedom counted once.
        group, var_f, dof = future
        var_g = by_group.get(group, (np.zeros_like(var_f), dof))[0]
        by_group[group] = (var_g + var_f, dof)
    parts = list(by_group.values())
    if not parts:
        low = high = est.copy()
    else:
        var = np.sum([v for v, _ in parts], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            df = var * var / np.sum([v * v / dof for v, dof in parts], axis=0)
            half = dist.t_ppf(0.5 + confidence / 2, np.where(var > 0, df, np.inf)) * np.sqrt(var)
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                low, high = est * np.exp(-half), est * np.exp(half)
        else:
            low, high = est - half, est + half
    bad = lin.unknown[key] | ~np.isfinite(est)
    if log:
        bad = bad | ~(est > 0)
    low = np.where(bad, np.nan, low)
    high = np.where(bad, np.nan, high)
    return est, low, high

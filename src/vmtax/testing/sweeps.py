"""Sweeps with known shapes, for tests and the report's examples: study B's two findings.

Study B publishes its throughput only as figures, so these curves carry the shapes its text
states, with known noise:

- ``xen``: scales from 1.0 to 1.5:1, then flat (knee at 1.5) while host CPUs stay near 92%;
  response time rises from the first step (throughput grows less than the clients do);
- ``zvm``: scales to 2.0:1, flat at 2.5:1, about 10% lower at 3.0:1 (knee at 2.0) with CPUs
  at 100%; response time flat until throughput stops scaling.

Response times follow the closed-loop law R = N / X - Z for N clients (4 per triplet, as the
study) and think time Z = 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Per shape: (ratios, relative throughput, host CPU utilisation), and the true knee.
SHAPES: dict[str, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], float]] = {
    "xen": ((1.0, 1.5, 2.0, 2.5), (1.0, 1.36, 1.36, 1.36), (0.63, 0.92, 0.92, 0.92), 1.5),
    "zvm": (
        (1.0, 1.5, 2.0, 2.5, 3.0),
        (1.0, 1.5, 2.0, 2.0, 1.8),
        (0.5, 0.75, 1.0, 1.0, 1.0),
        2.0,
    ),
}
CLIENTS_PER_TRIPLET = 4
TRIPLETS_AT_1 = 2  # study B: 2 triplets on 8 CPUs is 1.0:1


@dataclass(frozen=True)
class SyntheticSweep:
    ratios: tuple[float, ...]
    throughput: list[np.ndarray]  # transactions/s, one value per window sample
    response_s: list[np.ndarray]  # mean response time per window sample
    utilisation: list[np.ndarray]  # host CPU, fraction of all CPUs
    true_knee: float


def study_b(
    shape: str, *, samples: int = 10, noise: float = 0.03, base: float = 100.0, seed: int = 0
) -> SyntheticSweep:
    """One of study B's shapes with ``samples`` window samples per step and relative
    Gaussian noise ``noise`` on throughput (and half of it on utilisation)."""
    ratios, rel, util, knee = SHAPES[shape]
    rng = np.random.default_rng(seed)
    tput, resp, use = [], [], []
    for r, x, u in zip(ratios, rel, util, strict=True):
        clients = CLIENTS_PER_TRIPLET * TRIPLETS_AT_1 * r
        t = base * x * (1 + noise * rng.standard_normal(samples))
        tput.append(t)
        resp.append(clients / t)
        use.append(np.clip(u * (1 + noise / 2 * rng.standard_normal(samples)), 0, 1))
    return SyntheticSweep(ratios, tput, resp, use, knee)


def replicated(
    curve: np.ndarray,
    guests: np.ndarray,
    *,
    replicates: int = 3,
    trials: int = 1,
    window: int = 6,
    phi: float = 0.5,
    noise: float = 0.05,
    boot: float = 0.02,
    drift: float = 0.0,
    shared: bool = True,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Window samples of ``trials`` replicated sweeps, for the coverage tests.

    ``curve[s]`` is step s's true throughput and ``guests[s]`` its number of guests. Each
    round (replicate) boots its guests afresh; with ``shared`` its steps share them, as the
    sweep's rounds do (a step of n guests runs on the round's first n), so each guest's
    boot effect (relative sd ``boot``) enters every step of its round. ``drift`` is a
    relative effect per round (other load on the machine). Window samples are AR(1) with
    coefficient ``phi`` and marginal relative sd ``noise``.

    Returns the samples, shape (trials, replicates, steps, window), and the rounds'
    indices, shape (replicates, steps)."""
    rng = np.random.default_rng(seed)
    curve = np.asarray(curve, dtype=np.float64)
    guests = np.asarray(guests, dtype=int)
    steps, most = curve.size, int(guests.max())
    shape = (trials, replicates)
    if shared:
        g = rng.normal(0.0, boot, (*shape, most))
        per_step = np.stack([g[..., :n].mean(axis=-1) for n in guests], axis=-1)
    else:
        per_step = np.stack(
            [rng.normal(0.0, boot, (*shape, n)).mean(axis=-1) for n in guests], axis=-1
        )
    level = per_step + rng.normal(0.0, drift, (*shape, 1))
    e = np.empty((*shape, steps, window))
    e[..., 0] = rng.normal(0.0, noise, (*shape, steps))
    innov = noise * np.sqrt(1 - phi * phi)
    for t in range(1, window):
        e[..., t] = phi * e[..., t - 1] + rng.normal(0.0, innov, (*shape, steps))
    samples = curve[:, None] * (1.0 + level[..., None] + e)
    rounds = np.broadcast_to(np.arange(replicates)[:, None], (replicates, steps))
    return samples, rounds

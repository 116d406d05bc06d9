"""The time-driven term: exits that come with the guest's time rather than with its operations.

A level's exits per operation split into ``n_op`` (caused by the operation itself) and
``r · T`` (timer interrupts and the like, ``r`` per second of guest time, during an operation
that takes ``T``). Each time-driven exit costs ``c`` seconds of the operation's time, so

    T = T_ops + r · T · c     =>     T = T_ops / (1 − r · c)

and where ``r · c ≥ 1`` the time-driven exits take all the time there is: the level never
finishes an operation, and no number is given.

Calibration at the level itself, from three independent groups of runs:

- ``idle``: per run, the exits counted and the guest seconds of a run doing nothing:
  ``r = Σ exits / Σ seconds`` (means of the runs);
- ``spin``: per run, the time a fixed amount of exit-free work takes, against its time
  without any exit ``work``: ``spin = work + r · spin · c``, so ``c = (spin − work) / (r · spin)``;
- ``ops``: per run, the time per operation ``t`` and the exits per operation ``N`` counted:
  ``n_op = N − r · t`` and ``T_ops = t · (1 − r · c)``.

Intervals: the delta method over the groups with Welch–Satterthwaite's degrees of freedom
(vmtax.model.intervals); a predicted time's is on the log scale with one future run like the
``ops`` runs (docs/model.md, "The time-driven term").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vmtax.model.intervals import future_run, interval, linearise

Span = tuple[np.ndarray, np.ndarray, np.ndarray]


def _calibrate(work: float):
    def evaluate(m: dict[str, np.ndarray]) -> dict:
        rate = m["idle"][:, 0] / m["idle"][:, 1]
        cost = (m["spin"] - work) / (rate * m["spin"])
        t, exits = m["ops"][:, 0], m["ops"][:, 1]
        return {
            "rate": rate,
            "cost": cost,
            "n_op": exits - rate * t,
            "t_ops": t * (1.0 - rate * cost),
        }

    return evaluate


def calibrate(groups: dict[str, np.ndarray], work: float) -> dict[str, Span]:
    """(estimate, low, high) of ``rate`` (exits/s), ``cost`` (s/exit), ``n_op`` (exits/op)
    and ``t_ops`` (s/op) from the groups ``idle`` (runs, 2: exits, seconds), ``spin``
    (runs, 1: seconds for ``work`` seconds of exit-free work) and ``ops`` (runs, 2: seconds
    per op, exits per op), each with a leading trials axis."""
    lin = linearise(_calibrate(work), groups)
    return {key: interval(lin, key) for key in lin.estimate}


@dataclass(frozen=True)
class Prediction:
    """A level's time per operation, or why there is none (``never`` per trial)."""

    time: Span
    load: np.ndarray  # r · c: the share of the level's time the time-driven exits take
    never: np.ndarray

    def say(self, where: str, unit: str = "s") -> list[str]:
        """One line per trial: the time with its interval, or why there is none."""
        est, low, high = self.time
        return [
            f"{where}: r·c = {load:.3g} ≥ 1: the time-driven exits take all of its time, it "
            "never finishes an operation"
            if never
            else f"{where}: {e:.4g} [{lo:.4g}, {hi:.4g}] {unit} per operation (r·c = {load:.3g})"
            for e, lo, hi, load, never in zip(est, low, high, self.load, self.never, strict=True)
        ]


def _solve(m: dict[str, np.ndarray]) -> dict:
    load = m["rate"] * m["cost"]
    return {"load": load, "time": m["t_ops"] / (1.0 - load)}


def predict(groups: dict[str, np.ndarray]) -> Prediction:
    """``T = T_ops / (1 − r·c)`` at a level, with its 95% prediction interval, from the
    independent groups ``t_ops`` (runs or model values of the level's time per operation
    without time-driven exits), ``rate`` (exits per second of the level's guest time) and
    ``cost`` (seconds of the operation per time-driven exit at that level), each (trials,
    runs, 1). A future run is like the ``t_ops`` runs."""
    lin = linearise(_solve, groups)
    load = lin.estimate["load"]
    never = ~(load < 1.0)
    est, low, high = interval(lin, "time", log=True, future=future_run("t_ops", groups))
    nan = np.full(est.shape, np.nan)
    return Prediction(
        (np.where(never, nan, est), np.where(never, nan, low), np.where(never, nan, high)),
        load,
        never,
    )

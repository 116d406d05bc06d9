"""Every interval `vmtax model` prints covers its target 93–97.5% of the time at 3, 5, 7 and 10
runs a level, and an interval half as wide does not reach 93%.

The simulations run the model's own interval code (``nested.intervals``,
``outofsample.prediction_intervals`` and ``outofsample_timed.prediction_intervals``) on thousands
of trials at once: each group of runs gets a leading trials axis. Runs are lognormal with a CV of
5% (mean-corrected, so the mean of a level is its true cost). A parameter's target is its true
value; a prediction's is one future run at the level it predicts, drawn like the runs. Without
profiles every class multiplies alike (m_k = 24, each caused exit costing one null exit), so m_h's
true value is 24. With profiles the classes multiply differently, as each m_k is measured. 4,000
trials a cell: a true 0.95 has a standard error of 0.0034 on a cell of one outcome a trial.
docs/model.md ("Uncertainty") holds the table these tests produce.
"""

from __future__ import annotations

import numpy as np
import pytest

from vmtax.model.nested import Series, intervals
from vmtax.model.outofsample import prediction_intervals
from vmtax.model.outofsample_timed import prediction_intervals as timed_intervals

pytestmark = pytest.mark.fast

RUNS = (3, 5, 7, 10)
TRIALS = 4000
CV = 0.05
LOW, HIGH = 0.93, 0.975
PARAMETERS = ("a", "D", "x", "m", "m_h", "e")

# Without profiles: single-level costs, the DVH classes' extra nested cost x_k, one m.
A = {"cpuid": 1500.0, "io": 5000.0, "timer": 2000.0, "wakeup": 3300.0}
X = {"io": 3000.0, "timer": 800.0, "wakeup": 1500.0}
M = 24.0
# With profiles: each class's own m_k, the round trip, the handlers' times.
M_K = {"cpuid": 20.0, "io": 24.0, "timer": 22.0, "wakeup": 18.0}
E, T_NULL, T_CAUSED = 1000.0, 500.0, 900.0
# Out of sample: (VM-level ns/op, exits/op, exit time ns/op) and the nesting factor κ.
LOADS = {
    "cpuid": (20_000.0, 1.0, 15_000.0),
    "io": (300_000.0, 12.0, 90_000.0),
    "timer": (80_000.0, 6.0, 30_000.0),
    "wakeup": (50_000.0, 4.0, 12_000.0),
}
KAPPA = 3.0


def _runs(rng: np.random.Generator, mean: float, shape: tuple[int, ...]) -> np.ndarray:
    return mean * rng.lognormal(-CV * CV / 2, CV, shape)


def _template(n: int, **kwargs) -> list[Series]:
    """Series that say which groups exist; the values come from the groups."""
    one = np.ones(n)
    return [
        Series(
            k,
            "ns",
            one,
            one,
            dvh_nested=one if kwargs.get("dvh") and k in X else None,
            vm_profile=np.ones((n, 2)) if kwargs.get("profiles") else None,
            nested_profile=np.ones((n, 2)) if kwargs.get("profiles") else None,
        )
        for k in A
    ]


Coverage = dict[str, tuple[float, float]]


def _score(rng, spans: dict, truth: dict) -> Coverage:
    """Per interval kind: the coverage of the interval, and of one half as wide (half-widths
    halved, on the log scale for a prediction)."""
    hits: dict[str, list[np.ndarray]] = {}
    for key, (kind, value) in truth.items():
        est, low, high = spans[key]
        if key.split(":")[0] in PARAMETERS:
            target = np.full(est.shape, value)
            half = (est - (est - low) / 2, est + (high - est) / 2)
        else:
            target = _runs(rng, value, est.shape)  # one future run at that level
            half = (est * np.sqrt(low / est), est * np.sqrt(high / est))
        inside = [(lo <= target) & (target <= hi) for lo, hi in ((low, high), half)]
        hits.setdefault(kind, []).append(np.stack(inside))
    return {kind: tuple(np.concatenate(h, axis=1).mean(axis=1)) for kind, h in hits.items()}


def nested_coverage(n: int, seed: int) -> Coverage:
    """Without profiles: parameters, L3 and L4, the DVH what-if with and without its column."""
    rng = np.random.default_rng(seed)
    shape = (TRIALS, n, 1)
    groups, truth = {}, {"m_h": ("m_h (assumed: mean class)", M)}
    for k, a in A.items():
        d = M * A["cpuid"]
        groups[f"vm:{k}"] = _runs(rng, a, shape)
        groups[f"nested:{k}"] = _runs(rng, a + d, shape)
        truth |= {
            f"a:{k}": ("a", a),
            f"D:{k}": ("D", d),
            f"m:{k}": ("m (assumed: null exits)", M),
            f"c3:{k}": ("L3", a + d * (1 + M)),
            f"c4:{k}": ("L4", a + d * (1 + M + M * M)),
        }
        if k in X:
            groups[f"dvh_nested:{k}"] = _runs(rng, a + X[k], shape)
            truth |= {f"x:{k}": ("x", X[k]), f"dvh3:{k}": ("L3+DVH", a + X[k])}
    spans = intervals(_template(n, dvh=True), groups, (3, 4))
    scores = _score(rng, spans, truth)
    # Without the nested + DVH column: the lower bound a_k, a future run at the VM level.
    bound = {key: v for key, v in groups.items() if not key.startswith("dvh_nested")}
    spans = intervals(_template(n), bound, (3,))
    low_truth = {f"dvh3:{k}": ("L3+DVH lower bound", A[k]) for k in X}
    return scores | _score(rng, spans, low_truth)


def profile_coverage(n: int, seed: int) -> Coverage:
    """With exit profiles: e, m, m_h, the nested level decomposed, L3."""
    rng = np.random.default_rng(seed)
    groups, truth = {}, {"e": ("e", E), "m_h": ("m_h (profile)", M_K["cpuid"])}
    for k, a in A.items():
        n1, t1 = 1.0, T_NULL if k == "cpuid" else a - E
        n2, t2 = 1.0 + M_K[k], T_NULL + M_K[k] * T_CAUSED
        c2 = a + (n2 - n1) * E + t2
        groups[f"vm:{k}"] = _runs(rng, a, (TRIALS, n, 1))
        groups[f"nested:{k}"] = _runs(rng, c2, (TRIALS, n, 1))
        for name, (count, handling) in (("vm_profile", (n1, t1)), ("nested_profile", (n2, t2))):
            groups[f"{name}:{k}"] = np.concatenate(
                [_runs(rng, count, (TRIALS, n, 1)), _runs(rng, handling, (TRIALS, n, 1))], axis=2
            )
        truth |= {
            f"m:{k}": ("m (profile)", M_K[k]),
            f"c2pred:{k}": ("nested level decomposed", c2),
            f"c3:{k}": ("L3 (profile)", a + (c2 - a) * (1 + M_K["cpuid"])),
        }
    spans = intervals(_template(n, profiles=True), groups, (3,))
    return _score(rng, spans, truth)


def out_of_sample_coverage(n: int, seed: int) -> Coverage:
    """io's nested level from its VM level and κ fitted on cpuid, timer and wakeup."""
    rng = np.random.default_rng(seed)

    def vm(probe: str) -> np.ndarray:
        t, exits, load = LOADS[probe]
        return np.concatenate(
            [_runs(rng, t, (TRIALS, n, 1)), np.full((TRIALS, n, 1), exits),
             _runs(rng, load, (TRIALS, n, 1))], axis=2,
        )  # fmt: skip

    groups = {"target": vm("io")}
    for i, probe in enumerate(("cpuid", "timer", "wakeup")):
        t, _, load = LOADS[probe]
        groups[f"vm{i}"] = vm(probe)
        groups[f"nested{i}"] = _runs(rng, t + KAPPA * load, (TRIALS, n, 1))
    est, low, high, _ = prediction_intervals(groups, 3, "exit time")
    t, _, load = LOADS["io"]
    spans = {"io": (est, low, high)}
    return _score(rng, spans, {"io": ("out of sample", t + KAPPA * load)})


# The time-driven term (outofsample_timed): the share of time the time-driven exits take
# at the VM level and one level deeper, a spin chunk's work, and the VM level's time-driven
# exits and exit time per ns; LOADS' times and exit times are then the operations' parts.
LOAD_VM, LOAD_NESTED, WORK, RATE_VM, EXIT_TIME_RATE = 0.1, 0.5, 20_000.0, 250e-9, 0.0125


def out_of_sample_timed_coverage(n: int, seed: int) -> Coverage:
    """io's nested level with the time-driven term, κ fitted on cpuid, timer and wakeup."""
    rng = np.random.default_rng(seed)

    def vm(probe: str) -> np.ndarray:
        t_ops, exits, load = LOADS[probe]
        t = t_ops / (1 - LOAD_VM)
        return np.concatenate(
            [_runs(rng, t, (TRIALS, n, 1)), np.full((TRIALS, n, 1), exits + RATE_VM * t),
             _runs(rng, load + EXIT_TIME_RATE * t, (TRIALS, n, 1))], axis=2,
        )  # fmt: skip

    def nested(probe: str) -> float:
        t_ops, _, load = LOADS[probe]
        return (t_ops + KAPPA * load) / (1 - LOAD_NESTED)

    mean_vm, mean_n = WORK / (1 - LOAD_VM), WORK / (1 - LOAD_NESTED)
    groups = {
        "target": vm("io"),
        "spin_vm": np.concatenate(
            [
                _runs(rng, x, (TRIALS, n, 1))
                for x in (mean_vm, WORK, RATE_VM * mean_vm, EXIT_TIME_RATE * mean_vm)
            ],
            axis=2,
        ),
        "spin_nested": np.concatenate(
            [_runs(rng, mean_n, (TRIALS, n, 1)), _runs(rng, WORK, (TRIALS, n, 1))], axis=2
        ),
    }
    for i, probe in enumerate(("cpuid", "timer", "wakeup")):
        groups[f"vm{i}"] = vm(probe)
        groups[f"nested{i}"] = _runs(rng, nested(probe), (TRIALS, n, 1))
    got = timed_intervals(groups, 3, "exit time")
    spans = {"io": (got.predicted, got.low, got.high)}
    return _score(rng, spans, {"io": ("out of sample, time-driven", nested("io"))})


SIMULATIONS = {
    "nested": nested_coverage,
    "profile": profile_coverage,
    "out of sample": out_of_sample_coverage,
    "out of sample, time-driven": out_of_sample_timed_coverage,
}


@pytest.mark.parametrize("simulation", list(SIMULATIONS))
@pytest.mark.parametrize("n", RUNS)
def test_every_interval_covers_between_93_and_97_5_percent(simulation, n):
    run = SIMULATIONS[simulation]
    coverage = run(n, seed=n)
    assert coverage and all(LOW <= c <= HIGH for c, _ in coverage.values()), coverage
    assert all(half < LOW for _, half in coverage.values()), coverage  # the bound can fail

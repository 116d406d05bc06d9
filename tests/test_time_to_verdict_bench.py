"""bench/time_to_verdict.py's arithmetic on a small synthetic store: the truth it learns from a
calibration, the optimum against a brute-force search over every design, and the spent
columns against what was stored."""

from __future__ import annotations

import importlib.util
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats

from vmtax.store import Store
from vmtax.store.runtimes import RunTimes
from vmtax.testing.runs import run_statistics
from vmtax.version import __version__

pytestmark = pytest.mark.fast

BENCH = Path(__file__).resolve().parents[1] / "bench" / "time_to_verdict.py"
BOOT_GAP_S = 20.0  # between the last run of a boot and the first of the next
RUN_S = {"cpu": 0.5, "syscall": 1.0}  # the controller's seconds of a run
WALL_S = {"cpu": 0.4, "syscall": 0.8}  # the agent's
TARGET = 0.10
RUN_GAP_S, RUN_SLOWER = 30.0, 1.5  # the judged run's boots and runs, slower than calibrated


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("time_to_verdict", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ttv = _bench()


def _experiment(
    store: Store,
    command: list[str],
    boots: dict[str, list[int]],
    *,
    seed: int,
    plan: dict | None = None,
    boot_sd: float = 0.05,
    run_sd: float = 0.1,
    gap_s: float = BOOT_GAP_S,
    slower: float = 1.0,
) -> tuple[int, dict[str, list[float]]]:
    """One experiment with an L0 configuration (5 runs a probe) and an L1 one whose probes
    hold ``boots[probe]`` runs in each boot, the runs of a boot back to back, ``gap_s``
    between boots and each run ``slower`` times RUN_S; returns the id and each probe's L1
    run means."""
    rng = np.random.default_rng(seed)
    exp = store.create_experiment(command=command, suite="quick", seed=seed, plan=plan or {},
                                  vmtax_version=__version__, agent_version=None)  # fmt: skip
    clock = 1_000_000_000_000
    means: dict[str, list[float]] = {p: [] for p in boots}
    for level in ("L0", "L1"):
        cfg = store.configuration(experiment_id=exp, level=level, labels={}, fingerprint={},
                                  target="synthetic", provenance={"boot_seconds": 7.0})  # fmt: skip
        n_boots = max(len(b) for b in boots.values()) if level == "L1" else 1
        index = 0
        for b in range(n_boots):
            effect = rng.normal(0.0, boot_sd) if level == "L1" else 0.0
            for plan_index, (probe, per_boot) in enumerate(boots.items()):
                runs = 5 if level == "L0" else (per_boot[b] if b < len(per_boot) else 0)
                for _ in range(runs):
                    values = np.exp(5.0 + effect + rng.normal(0.0, run_sd)) * np.ones(20)
                    if level == "L1":
                        means[probe].append(float(values.mean()))
                    start = clock
                    clock += int(slower * RUN_S[probe] * 1e9)
                    now = datetime.now(UTC)
                    store.add_run(
                        experiment_id=exp, configuration_id=cfg, probe=probe,
                        plan_index=plan_index, run_index=index, status="ok",
                        header={"unit": "ns", "better": "lower",
                                "boot_id": f"e{exp}-{level}-b{b}"},
                        summary={**run_statistics(values), "wall_s": WALL_S[probe]},
                        values=values, warmup_values=np.empty(0),
                        times=RunTimes(start, now, clock, now),
                    )  # fmt: skip
                    index += 1
            clock += int(gap_s * 1e9)
    store.finish_experiment(exp, "ok")
    return exp, means


@pytest.fixture
def stored(tmp_path: Path) -> tuple[str, int, int, dict[str, list[float]]]:
    db = f"sqlite:///{tmp_path / 'ttv.db'}"
    with Store.open(db) as store:
        cal, _ = _experiment(store, ["vmtax", "calibrate", "--levels", "L1"],
                             {"cpu": [3] * 8, "syscall": [3] * 8}, seed=1)  # fmt: skip
        run, means = _experiment(
            store, ["vmtax", "run", "--levels", "L0,L1"],
            {"cpu": [4, 4, 4], "syscall": [6, 6, 2, 5]}, seed=2,
            plan={"sampling": {"precision": TARGET}}, gap_s=RUN_GAP_S, slower=RUN_SLOWER,
        )  # fmt: skip
    return db, cal, run, means


def _brute_force(between: float, within: float, boot_s: float, run_s: float,
                 target: float) -> tuple[float, int, int]:  # fmt: skip
    """The cheapest (seconds, B, k) over every B in 2..1000 and k in 1..100 whose expected
    boot-level half-width is within log(1 + target)."""
    b = np.arange(2, 1001)[:, None]
    k = np.arange(1, 101)[None, :]
    half = stats.t.ppf(0.975, b - 1) * np.sqrt((between + within / k) / b)
    cost = np.where(half <= math.log1p(target), b * (boot_s + k * run_s), np.inf)
    i, j = np.unravel_index(np.argmin(cost), cost.shape)
    return float(cost[i, j]), int(b[i, 0]), int(k[0, j])


@pytest.mark.parametrize(
    ("between", "within", "boot_s", "run_s", "target"),
    [
        (0.03**2, 0.01**2, 11.0, 0.3, 0.03),
        (0.005**2, 0.03**2, 60.0, 1.0, 0.03),
        (0.0, 0.2**2, 20.0, 0.2, 0.05),
        (0.02**2, 0.3**2, 25.0, 0.2, 0.10),
        (0.05**2, 0.5**2, 40.0, 0.18, 0.05),
    ],
)
def test_the_optimum_is_the_cheapest_design_of_a_brute_force_search(
    between: float, within: float, boot_s: float, run_s: float, target: float
) -> None:
    truth = ttv.Truth("p", between, within, boot_s, run_s, 16, 48)
    best = ttv.optimum(truth, target)
    cost, boots, runs = _brute_force(between, within, boot_s, run_s, target)
    assert best.reached
    assert best.seconds == pytest.approx(cost, rel=1e-9), (best, boots, runs)
    assert best.seconds == pytest.approx(best.boots * (boot_s + best.runs_per_boot * run_s))


def test_the_truth_is_the_calibration_s_components_and_costs(stored) -> None:
    db, cal, _, _ = stored
    with Store.open(db, read_only=True) as store:
        truths = ttv.truth(store, cal)
    assert set(truths) == {"cpu", "syscall"}
    for probe, t in truths.items():
        assert t.boots == 8 and t.runs == 24
        assert t.boot_cost_s == pytest.approx(BOOT_GAP_S)
        assert t.run_cost_s == pytest.approx(RUN_S[probe])
        assert 0 < t.within < 0.1**2 * 3 and t.between >= 0


def test_the_spent_columns_are_what_was_stored(stored) -> None:
    db, cal, run, means = stored
    with Store.open(db, read_only=True) as store:
        truths = ttv.truth(store, cal)
        rows = ttv.spent(store, run, TARGET)
        elapsed = ttv.guest_elapsed(store, run)
    frame = ttv.table(rows, truths, TARGET).set_index("probe")
    layout = {"cpu": [4, 4, 4], "syscall": [6, 6, 2, 5]}
    for probe, per_boot in layout.items():
        row = frame.loc[probe]
        assert row["boots"] == len(per_boot) and row["runs"] == sum(per_boot)
        assert row["run_s"] == pytest.approx(sum(per_boot) * RUN_SLOWER * RUN_S[probe])
        assert row["wall_s"] == pytest.approx(sum(per_boot) * WALL_S[probe])
        assert row["spent_s"] == pytest.approx(len(per_boot) * RUN_GAP_S + row["run_s"])
        # The optimum is priced as the run paid (its boots and runs), and as the calibration
        # did beside it; the components are the calibration's either way.
        t = truths[probe]
        paid = ttv.Truth(probe, t.between, t.within, RUN_GAP_S, RUN_SLOWER * RUN_S[probe], 8, 24)
        cost, _, _ = _brute_force(t.between, t.within, RUN_GAP_S, RUN_SLOWER * RUN_S[probe],
                                  TARGET)  # fmt: skip
        assert row["opt_s"] == pytest.approx(cost) == ttv.optimum(paid, TARGET).seconds
        assert row["opt_calibration_s"] == pytest.approx(ttv.optimum(t, TARGET).seconds)
        assert row["opt_s"] == pytest.approx(RUN_SLOWER * row["opt_calibration_s"], rel=0.3)
        assert row["ratio"] == pytest.approx(row["spent_s"] / row["opt_s"])
    # Balanced boots: the half-width is t(B - 1) times the standard error of the mean of the
    # boot means, relative to it (the delta method's log scale).
    boot_means = np.asarray(means["cpu"]).reshape(3, 4).mean(axis=1)
    expected = stats.t.ppf(0.975, 2) * boot_means.std(ddof=1) / math.sqrt(3) / boot_means.mean()
    assert frame.loc["cpu", "hw_pct"] == pytest.approx(100 * expected, rel=1e-9)
    assert frame.loc["cpu", "reached"] == (expected <= TARGET)
    # The guest's whole time: its recorded first boot, then its first run to its last.
    runs_s = sum(sum(b) * RUN_SLOWER * RUN_S[p] for p, b in layout.items())
    assert elapsed["L1"] == pytest.approx(7.0 + runs_s + 3 * RUN_GAP_S)
    lo, mid, hi = ttv.ratio_summary(frame)
    assert lo == frame["ratio"].min() and hi == frame["ratio"].max()
    assert mid == pytest.approx(frame["ratio"].median())


def test_main_reads_the_store_and_prints_the_table(stored, capsys) -> None:
    db, cal, run, _ = stored
    assert ttv.main(["--db", db, "--no-compare", "--plan-targets", "5%,10%"]) == 0
    out = capsys.readouterr().out
    assert f"calibration: experiment {cal}" in out
    assert f"experiment {run}: vmtax run --levels L0,L1" in out
    assert "spent / optimum: min" in out and "joint optimum" in out
    assert "±10%:" in out

"""Time to a verdict: the boots, runs and seconds `vmtax run` spent to reach a precision
target at the boot level, beside what Kalibera and Jones' optimum would spend knowing the
true variance components, on this machine.

The truth is a long dimensioning experiment (`vmtax calibrate`, many boots of few runs): per
probe, the between-boot and within-boot variances of its log run means (the sums of squares
of `vmtax.noise.components.source`, as a noise profile holds them), the cost of a boot (the
median gap between the last run of one boot and the first of the next) and of each probe's
run (the median time the controller spent on it), measured as `vmtax calibrate` measures them.

Every other experiment in the store (or those named) is judged against it, per guest
configuration and probe:

- spent: the boots its runs were measured in, its ok runs, the controller's seconds of all its
  runs (the agent's `wall_s` beside them), and seconds = boots x that experiment's own boot
  cost + the runs' seconds;
- reached: the relative half-width (log scale) of the boot-level 95% interval of its mean,
  the interval `vmtax compare` builds for the side and the sampler judges
  (`sampling.boot_design.boot_look`), and, when the experiment has an L0 configuration, the
  half-width of the overhead's interval `vmtax compare --format json` prints against it;
- optimum: the cheapest B boots of k runs of that probe alone whose expected half-width
  t(B - 1) * sqrt((between + within / k) / B) is within log(1 + target), on the true
  components and the calibration's boot and run costs (`noise.plan.joint` over the one probe:
  every k from 1 to 100, the fewest boots for each);
- spent / optimum, with its min, median and max over the probes.

The probes of a guest share its boots, so each probe's seconds count every boot it was in,
as the one-probe optimum counts its own. The guest's line below the table sets its whole time
(its first boot, then from its first run's start to its last run's end) against the joint
optimum of all its probes in shared boots (`noise.plan.joint`), the design `vmtax run` plans
from a noise profile.

It reads a store, or drives `vmtax` itself (as subprocesses) first: with --calibrate-boots a
calibration, then one run to the target per --design: `profile` (`vmtax run` plans from the
profile) and `adaptive` (the run labelled so that no profile applies: adaptive sampling at
the boot level). --plan-targets prints the joint optimum the truth gives for several targets,
which says what a target costs before a run is started.

Examples:
    python bench/time_to_verdict.py --db sqlite:///ttv.db --target 10%
    python bench/time_to_verdict.py --db sqlite:///ttv.db --calibrate-boots 16 \\
        --calibrate-runs 3 --target 10% --levels L0,L1 --budget 15m --design both
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from vmtax.experiment.calibrate import _boot_cost, _run_cost
from vmtax.noise import plan as noise_plan
from vmtax.noise.components import Components, source
from vmtax.sampling.boot_design import boot_look, kalibera_jones
from vmtax.store import Store

#: The label that keeps a run's guest configuration off the calibration's profile.
ADAPTIVE_LABEL = "ttv=adaptive"


@dataclass(frozen=True)
class Truth:
    """One probe's true components (log scale) and costs, from the dimensioning run."""

    probe: str
    between: float
    within: float
    boot_cost_s: float
    run_cost_s: float
    boots: int
    runs: int


@dataclass(frozen=True)
class Spent:
    """What one experiment spent on one probe of one guest configuration."""

    experiment_id: int
    config: str
    probe: str
    boots: int
    runs: int
    run_s: float  # the controller's seconds of every run of the probe
    run_cost_s: float  # the median of its ok runs' (NaN: none)
    wall_s: float  # the agent's measured seconds of its ok runs
    boot_cost_s: float  # the experiment's own boot cost
    half_width: float  # boot-level, relative (log scale); inf with fewer than 2 boots
    between: float  # this run's own estimates (log scale; NaN: not estimable)
    within: float

    @property
    def seconds(self) -> float:
        return self.boots * self.boot_cost_s + self.run_s


def is_guest(level: str) -> bool:
    return level != "L0"


def _guest_frames(store: Store, exp_id: int) -> list[tuple[pd.Series, pd.DataFrame]]:
    """(configuration row, its runs) of every guest configuration of one experiment."""
    runs = store.noise.experiment_runs(exp_id)
    configs = store.configurations()
    configs = configs[(configs["experiment_id"] == exp_id) & configs["level"].map(is_guest)]
    return [
        (row, runs[runs["configuration_id"] == row.configuration_id])
        for _, row in configs.iterrows()
    ]


def _logs(means: pd.Series) -> np.ndarray:
    x = pd.to_numeric(means, errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.log(x), np.nan)


def _boots(ids: pd.Series) -> list[str]:
    return [b if isinstance(b, str) and b else "?" for b in ids]


def truth(store: Store, exp_id: int) -> dict[str, Truth]:
    """Each probe's components and costs from the calibration experiment ``exp_id`` (its
    guest configurations' ok runs, pooled as a profile pools the sides of an A/A test)."""
    frames = _guest_frames(store, exp_id)
    if not frames:
        raise SystemExit(f"experiment {exp_id} has no guest configuration to learn from")
    costs = [_boot_cost(r[r["status"] == "ok"], row.provenance) for row, r in frames]
    known = [c for c in costs if c is not None]
    if not known:
        raise SystemExit(f"experiment {exp_id}: no boot cost (no second boot, none recorded)")
    boot_cost = float(np.median(known))
    ok = pd.concat([r[r["status"] == "ok"] for _, r in frames])
    out: dict[str, Truth] = {}
    for probe, group in ok.groupby("probe", sort=True):
        src = source(_logs(group["mean"]), _boots(group["boot_id"]), experiment_id=exp_id)
        run_cost = _run_cost(group)
        if src is None or run_cost is None:
            continue
        comps = Components((src,))
        out[str(probe)] = Truth(
            str(probe), comps.between, comps.within, boot_cost, run_cost, src.boots, src.runs
        )
    return out


def spent(store: Store, exp_id: int, target: float) -> list[Spent]:
    """Per guest configuration and probe, what experiment ``exp_id`` spent and reached."""
    out = []
    for row, runs in _guest_frames(store, exp_id):
        ok_all = runs[runs["status"] == "ok"]
        boot_cost = _boot_cost(ok_all, row.provenance)
        for probe, group in runs.groupby("probe", sort=True):
            ok = group[group["status"] == "ok"]
            look = boot_look(
                pd.to_numeric(ok["mean"], errors="coerce").to_numpy(dtype=np.float64),
                _boots(ok["boot_id"]),
                "",
                target,
            )
            out.append(
                Spent(
                    experiment_id=exp_id,
                    config=str(row.config),
                    probe=str(probe),
                    boots=int(ok["boot_id"].nunique()),
                    runs=len(ok),
                    run_s=_controller_seconds(group),
                    run_cost_s=_run_cost(ok) or math.nan,
                    wall_s=float(pd.to_numeric(ok["wall_s"], errors="coerce").sum()),
                    boot_cost_s=math.nan if boot_cost is None else float(boot_cost),
                    half_width=look.half_width,
                    between=look.between,
                    within=look.within,
                )
            )
    return out


def _controller_seconds(runs: pd.DataFrame) -> float:
    """The seconds the controller spent on these runs (start to end), their ``wall_s`` for a
    run stored without its times."""
    start = pd.to_numeric(runs["started_ns"], errors="coerce")
    end = pd.to_numeric(runs["ended_ns"], errors="coerce")
    each = ((end - start) / 1e9).where(lambda s: s > 0)
    each = each.fillna(pd.to_numeric(runs["wall_s"], errors="coerce"))
    return float(each.fillna(0.0).sum())


def guest_elapsed(store: Store, exp_id: int) -> dict[str, float]:
    """Per guest configuration of ``exp_id``: its first boot (as its target timed it, else
    the experiment's boot cost) plus the time from its first run's start to its last run's
    end, in seconds."""
    out = {}
    for row, runs in _guest_frames(store, exp_id):
        start = pd.to_numeric(runs["started_ns"], errors="coerce").min()
        end = pd.to_numeric(runs["ended_ns"], errors="coerce").max()
        if not (math.isfinite(start) and math.isfinite(end)):
            continue
        prov = row.provenance if isinstance(row.provenance, dict) else {}
        first = prov.get("boot_seconds")
        if not isinstance(first, int | float):
            first = _boot_cost(runs[runs["status"] == "ok"], None) or 0.0
        out[str(row.config)] = float(first) + (float(end) - float(start)) / 1e9
    return out


def optimum(t: Truth, target: float) -> noise_plan.Design:
    """Kalibera and Jones' cheapest design for one probe with its true components."""
    return noise_plan.joint([(t.between, t.within, t.run_cost_s)], t.boot_cost_s, target)


def joint_optimum(truths: Sequence[Truth], target: float) -> noise_plan.Design:
    """The cheapest design for all ``truths`` measured in shared boots."""
    boot_cost = max(t.boot_cost_s for t in truths)
    return noise_plan.joint([(t.between, t.within, t.run_cost_s) for t in truths], boot_cost,
                            target)  # fmt: skip


def priced(t: Truth, boot_cost_s: float, run_cost_s: float) -> Truth:
    """The true components at another boot and run cost (a cost not measured keeps the
    calibration's)."""
    return replace(
        t,
        boot_cost_s=boot_cost_s if boot_cost_s > 0 else t.boot_cost_s,
        run_cost_s=run_cost_s if run_cost_s > 0 else t.run_cost_s,
    )


def table(
    spent_rows: Sequence[Spent],
    truths: dict[str, Truth],
    target: float,
    overhead_hw: dict[tuple[str, str], float] | None = None,
) -> pd.DataFrame:
    """One row per spent probe that has a truth: spent, reached, optimum and their ratio."""
    rows = []
    for s in spent_rows:
        t = truths.get(s.probe)
        if t is None:
            continue
        # Priced as the run paid: the load that slows boots and runs between the calibration
        # and the run is not the design's doing. At the calibration's prices beside it.
        best = optimum(priced(t, s.boot_cost_s, s.run_cost_s), target)
        at_calibration = optimum(t, target)
        rows.append(
            {
                "experiment": s.experiment_id,
                "config": s.config,
                "probe": s.probe,
                "boots": s.boots,
                "runs": s.runs,
                "run_s": s.run_s,
                "wall_s": s.wall_s,
                "spent_s": s.seconds,
                "hw_pct": 100.0 * s.half_width,
                "overhead_hw_pct": 100.0 * (overhead_hw or {}).get((s.config, s.probe), math.nan),
                "reached": s.half_width <= target,
                "between_sd_pct": 100.0 * math.sqrt(t.between),
                "within_sd_pct": 100.0 * math.sqrt(t.within),
                "run_between_sd_pct": 100.0 * math.sqrt(max(s.between, 0.0)),
                "run_within_sd_pct": 100.0 * math.sqrt(max(s.within, 0.0)),
                "kj_k": kalibera_jones(t.between, t.within, t.boot_cost_s, t.run_cost_s),
                "opt_boots": best.boots,
                "opt_runs_per_boot": best.runs_per_boot,
                "opt_s": best.seconds if best.reached else math.nan,
                "opt_calibration_s": at_calibration.seconds if at_calibration.reached else math.nan,
                "ratio": s.seconds / best.seconds if best.reached else math.nan,
            }
        )
    return pd.DataFrame(rows)


def ratio_summary(frame: pd.DataFrame) -> tuple[float, float, float]:
    """(min, median, max) of spent / optimum over the rows that have one."""
    r = frame["ratio"].dropna()
    if r.empty:
        return math.nan, math.nan, math.nan
    return float(r.min()), float(r.median()), float(r.max())


# -- driving vmtax -----------------------------------------------------------------------


def vmtax_argv() -> list[str]:
    found = shutil.which("vmtax")
    return [found] if found else [sys.executable, "-c", "from vmtax.entry import main; main()"]


def drive(argv: list[str]) -> float:
    """Run one vmtax command (an argument list); its wall seconds. Its output is passed on."""
    print("$ vmtax " + " ".join(argv[len(vmtax_argv()) :]), flush=True)
    env = {**os.environ, "VMTAX_RUN_REPORT": "none"}
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, check=False)  # noqa: S603 - an argument list
    took = time.monotonic() - start
    print(f"  exit {proc.returncode}, {took:.0f} s, load {load()}", flush=True)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"vmtax failed (exit {proc.returncode})")
    return took


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compare_half_widths(db: str, exp_id: int) -> dict[tuple[str, str], float]:
    """(config, probe) -> the relative (log) half-width of the overhead interval
    `vmtax compare` prints against the experiment's L0, for its guest rows."""
    argv = [*vmtax_argv(), "compare", f"exp={exp_id}", "--baseline", "level=L0",
            "--format", "json", "--db", db]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode not in (0, 3):
        print(f"  compare exp={exp_id}: exit {proc.returncode}: {proc.stderr.strip()[:200]}")
        return {}
    out = {}
    for row in json.loads(proc.stdout)["rows"]:
        lo, hi = row.get("ci_low"), row.get("ci_high")
        if row["probe"] != "geomean" and row.get("metric") == "mean" and lo and hi:
            config = re.sub(r"^#\d+ ", "", str(row["config"]))  # one experiment: no prefix
            out[(config, str(row["probe"]))] = math.log(hi / lo) / 2
    return out


def percent(text: str) -> float:
    value = float(text.strip().rstrip("%"))
    return value / 100.0 if text.strip().endswith("%") or value >= 1 else value


# -- output ------------------------------------------------------------------------------


def print_truth(truths: dict[str, Truth]) -> None:
    any_t = next(iter(truths.values()))
    print(f"truth: {any_t.boots} boots, boot {any_t.boot_cost_s:.1f} s")
    print(f"{'probe':<10} {'runs':>5} {'between sd%':>11} {'within sd%':>10} {'run s':>6}")
    for t in truths.values():
        print(f"{t.probe:<10} {t.runs:5d} {100 * math.sqrt(t.between):11.2f} "
              f"{100 * math.sqrt(t.within):10.2f} {t.run_cost_s:6.3f}")  # fmt: skip


def print_plans(truths: dict[str, Truth], targets: Sequence[float]) -> None:
    print("joint optimum of these probes in shared boots, per target:")
    for target in targets:
        d = joint_optimum(list(truths.values()), target)
        how = "" if d.reached else f" (only ±{100 * d.half_width:.1f}%)"
        print(f"  ±{100 * target:g}%: {d.boots} boots x {d.runs_per_boot} runs, "
              f"{d.seconds:.0f} s{how}")  # fmt: skip


def print_table(frame: pd.DataFrame, target: float) -> None:
    head = (f"{'probe':<10} {'boots':>5} {'runs':>5} {'runs s':>7} {'spent s':>8} "
            f"{'±L1 %':>6} {'±ovh %':>6} {'opt BxK':>8} {'opt s':>7} {'ratio':>6} "
            f"{'cal s':>6} {'sd% cal':>8} {'sd% run':>8}")  # fmt: skip
    print(head)
    for r in frame.itertuples():
        mark = "" if r.reached else "*"
        print(f"{r.probe:<10} {r.boots:5d} {r.runs:5d} {r.run_s:7.1f} {r.spent_s:8.0f} "
              f"{r.hw_pct:5.1f}{mark:1} {r.overhead_hw_pct:6.1f} "
              f"{f'{r.opt_boots}x{r.opt_runs_per_boot}':>8} {r.opt_s:7.0f} "
              f"{r.ratio:6.2f} {r.opt_calibration_s:6.0f} "
              f"{f'{r.between_sd_pct:.0f}/{r.within_sd_pct:.0f}':>8} "
              f"{f'{r.run_between_sd_pct:.0f}/{r.run_within_sd_pct:.0f}':>8}")  # fmt: skip
    lo, mid, hi = ratio_summary(frame)
    reached = frame[frame["reached"]]
    print(f"spent / optimum: min {lo:.2f}, median {mid:.2f}, max {hi:.2f}; "
          f"{len(reached)} of {len(frame)} probes within ±{100 * target:g}% at the boot level "
          f"(* not: what they spent bought no verdict)")  # fmt: skip
    if 0 < len(reached) < len(frame):
        lo, mid, hi = ratio_summary(reached)
        print(f"  over the {len(reached)} that reached it: min {lo:.2f}, median {mid:.2f}, "
              f"max {hi:.2f}")  # fmt: skip


def print_config(
    config: str, part: pd.DataFrame, own: dict[str, Spent], truths: dict[str, Truth],
    target: float,
) -> None:  # fmt: skip
    first = next(iter(own.values()))
    slower = np.median([own[p].run_cost_s / truths[p].run_cost_s for p in part["probe"]])
    print(f"{config}: target ±{100 * target:g}%; a boot {first.boot_cost_s:.1f} s "
          f"(calibration {truths[first.probe].boot_cost_s:.1f} s), a run {slower:.2f}x the "
          f"calibration's (median); optimum priced as this run paid, `cal s` at the "
          f"calibration's prices; ±L1: the boot-level interval of the guest's mean, ±ovh: "
          f"compare's overhead interval against L0 (log scale); sd%: between/within boots, "
          f"the calibration's (the truth) and this run's own")  # fmt: skip
    print_table(part, target)


def guest_line(
    part: pd.DataFrame, own: dict[str, Spent], truths: dict[str, Truth], target: float,
    elapsed: float,
) -> str:  # fmt: skip
    """The guest's whole time against the joint optimum of its probes in shared boots,
    priced as the run paid and as the calibration did."""
    probes = list(part["probe"])
    here = [priced(truths[p], own[p].boot_cost_s, own[p].run_cost_s) for p in probes]
    out = (f"whole guest: {part['boots'].max()} boots, {part['runs'].sum()} runs, "
           f"{elapsed:.0f} s (its first boot, then its first run to its last)")  # fmt: skip
    for name, truths_at in (
        ("this run's", here),
        ("the calibration's", [truths[p] for p in probes]),
    ):
        joint = joint_optimum(truths_at, target)
        if joint.reached:
            out += (f"; joint optimum at {name} prices {joint.boots} boots x "
                    f"{joint.runs_per_boot} runs, {joint.seconds:.0f} s "
                    f"(ratio {elapsed / joint.seconds:.2f})")  # fmt: skip
        else:
            out += f"; joint optimum at {name} prices out of reach within {joint.boots} boots"
    return out


def main(args: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--db", required=True, help="store URL (sqlite:///path)")
    ap.add_argument("--calibration", type=int, help="the dimensioning experiment's id")
    ap.add_argument(
        "--experiment",
        type=int,
        action="append",
        default=[],
        help="an experiment to judge (repeatable; default every other one)",
    )
    ap.add_argument("--target", help="precision target, e.g. 10%% (default: the run's)")
    ap.add_argument(
        "--calibrate-boots",
        type=int,
        default=0,
        help="run `vmtax calibrate` with this many boots first",
    )
    ap.add_argument("--calibrate-runs", type=int, default=3, help="its runs per boot")
    ap.add_argument("--levels", default="L0,L1", help="levels of the run to the target")
    ap.add_argument("--probe", action="append", default=[], help="only this probe")
    ap.add_argument("--budget", default="15m", help="the run's --budget")
    ap.add_argument(
        "--design",
        choices=["none", "profile", "adaptive", "both"],
        default="none",
        help="run vmtax to the target first (default: read the store only)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plan-targets", default="", help="e.g. 3%%,5%%,10%%")
    ap.add_argument(
        "--no-compare", action="store_true", help="skip the overhead intervals of `vmtax compare`"
    )
    ap.add_argument("--csv", help="write the table here too")
    a = ap.parse_args(args)  # fmt: skip
    probes = [x for p in a.probe for x in ("--probe", p)]
    guest = [x for x in a.levels.split(",") if is_guest(x.strip().upper())][-1]
    print(f"load before: {load()}")
    if a.calibrate_boots:
        drive([*vmtax_argv(), "calibrate", "--levels", guest, "--boots", str(a.calibrate_boots),
               "--runs-per-boot", str(a.calibrate_runs), "--seed", str(a.seed), "--db", a.db,
               *probes])  # fmt: skip
    if a.design != "none":
        if not a.target:
            raise SystemExit("--design needs --target")
        run = [*vmtax_argv(), "run", "--levels", a.levels, "--precision", a.target,
               "--budget", a.budget, "--seed", str(a.seed), "--db", a.db, *probes]  # fmt: skip
        if a.design in ("profile", "both"):
            drive(run)
        if a.design in ("adaptive", "both"):
            drive([*run, "--label", ADAPTIVE_LABEL])
    with Store.open(a.db, read_only=True) as store:
        exps = store.experiments()
        cal = a.calibration
        if cal is None:
            calibrations = [int(e) for e, cmd in zip(exps["experiment_id"], exps["command"],
                            strict=True) if "calibrate" in list(cmd or [])]  # fmt: skip
            if not calibrations:
                raise SystemExit("no calibration in the store: give --calibration")
            cal = calibrations[-1]
        truths = truth(store, cal)
        if a.probe:
            truths = {p: t for p, t in truths.items() if p in a.probe}
        print(f"calibration: experiment {cal}")
        print_truth(truths)
        if a.plan_targets:
            print_plans(truths, [percent(x) for x in a.plan_targets.split(",")])
        judged = a.experiment or [
            int(e) for e in exps["experiment_id"] if int(e) != cal and _guest_frames(store, int(e))
        ]
        for exp in judged:
            info = store.experiment(exp)
            sampling = (info.get("plan") or {}).get("sampling") or {}
            target = percent(a.target) if a.target else sampling.get("precision")
            if target is None:
                print(f"experiment {exp}: no precision target (give --target)")
                continue
            rows = spent(store, exp, float(target))
            has_l0 = any(c["level"] == "L0" for c in info["configurations"])
            hw = {} if a.no_compare or not has_l0 else compare_half_widths(a.db, exp)
            frame = table(rows, truths, float(target), hw)
            if frame.empty:
                continue
            cmd = " ".join(info.get("command") or [])
            print(f"\nexperiment {exp}: {cmd}")
            elapsed = guest_elapsed(store, exp)
            for config, part in frame.groupby("config", sort=False):
                own = {s.probe: s for s in rows if s.config == config}
                print_config(str(config), part, own, truths, float(target))
                print(guest_line(part, own, truths, float(target),
                                 elapsed.get(str(config), math.nan)))  # fmt: skip
            if a.csv:
                frame.to_csv(a.csv, mode="a", index=False, header=not os.path.exists(a.csv))
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``vmtax explain`` reads from the store: the configuration (a level with exit
profiles), its baseline one level down, each probe's runs in ns per operation, and each
profiled run's exits and handling per operation by reason, as recorded by the hypervisor
that runs the configuration (one level below it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vmtax.errors import UsageError, VmtaxError
from vmtax.explain.decompose import ProbeRuns
from vmtax.hostprof.perop import per_reason, per_vcpu_reason
from vmtax.hostprof.store import COLUMNS, VCPU_COLUMNS, exit_profiles, path_cpus, vcpu_counts
from vmtax.hostprof.table import matches
from vmtax.model.mechanisms import MECHANISMS, NULL
from vmtax.model.sources import level_number, ns_per_op, tsc_rates

if TYPE_CHECKING:
    from vmtax.store import Store


@dataclass
class Selection:
    """The configuration and baseline chosen, the probes to explain and the round-trip one."""

    config: str
    baseline: str
    probes: list[ProbeRuns]
    source: ProbeRuns
    recorded_at: str


def select(
    runs: pd.DataFrame,
    profiles: pd.DataFrame,
    tsc_hz: dict[int, float],
    *,
    config: str | None,
    baseline: str | None,
    probes: Sequence[str],
    round_trip_probe: str,
    vcpus: pd.DataFrame | None = None,
    paths: dict[int, tuple[int, ...]] | None = None,
) -> Selection:
    """Pick the configuration and baseline, check them, and gather every probe's runs.
    ``vcpus`` (``hostprof.store.vcpu_counts``) and ``paths`` (run -> the vCPUs of its
    pinned client and server) give the split by vCPU where the profiles have one."""
    if MECHANISMS.get(round_trip_probe) != NULL:
        raise UsageError(
            f"--round-trip-probe {round_trip_probe!r}: its exit mechanism is not the null exit; "
            f"the round trip comes from {', '.join(p for p, m in MECHANISMS.items() if m == NULL)}"
        )
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        raise UsageError("no completed runs match the selectors")
    profiled = (
        set(profiles.loc[profiles["complete"].astype(bool), "run_id"]) if len(profiles) else set()
    )
    configs = ok.drop_duplicates("config")[["config", "level"]]
    chosen = _pick_config(configs, ok, profiled, config)
    level = level_number(chosen["level"])
    below = _pick_baseline(configs, level, baseline)
    recorded_at = f"L{level - 1}"
    at_config = ok[(ok["config"] == chosen["config"]) & ok["run_id"].isin(profiled)]
    reasons = per_reason(profiles[profiles["run_id"].isin(at_config["run_id"])], recorded_at)
    split = per_vcpu_reason(
        profiles[profiles["run_id"].isin(at_config["run_id"])],
        vcpus if vcpus is not None else pd.DataFrame(columns=VCPU_COLUMNS),
        recorded_at,
    )
    at_config = at_config[at_config["run_id"].isin(reasons["run_id"])]
    if at_config.empty:
        raise UsageError(
            f"{chosen['config']} has no complete exit profile recorded at {recorded_at} (the "
            "hypervisor that runs it); record one with vmtax run --exits"
        )
    at_base = ok[ok["config"] == below]
    have = sorted(set(at_config["probe"]))
    wanted = list(probes) or have
    for p in wanted:
        if p not in have:
            raise UsageError(
                f"probe {p!r}: no run with an exit profile at {chosen['config']}, so its exit "
                f"mechanism is unknown (profiled there: {', '.join(have)})"
            )
        if p not in set(at_base["probe"]):
            raise UsageError(f"probe {p!r} has no completed run at the baseline {below}")
    if round_trip_probe not in have or round_trip_probe not in set(at_base["probe"]):
        raise UsageError(
            f"the round trip of an exit comes from {round_trip_probe} at {chosen['config']} "
            f"and {below}, with its exit profile; run --probe {round_trip_probe} --exits at "
            "both levels"
        )

    def gather(probe: str) -> ProbeRuns:
        mine = at_config[at_config["probe"] == probe].sort_values("run_id")
        base = at_base[at_base["probe"] == probe]
        return ProbeRuns(
            probe=probe,
            config=str(chosen["config"]),
            baseline=below,
            run_ids=mine["run_id"].to_numpy(dtype=np.int64),
            times=ns_per_op(mine, tsc_hz),
            base_times=ns_per_op(base, tsc_hz),
            reasons=reasons[reasons["run_id"].isin(mine["run_id"])].reset_index(drop=True),
            vcpu_reasons=split[split["run_id"].isin(mine["run_id"])].reset_index(drop=True),
            path=_path(mine["run_id"], paths or {}),
        )

    return Selection(
        config=str(chosen["config"]),
        baseline=below,
        probes=[gather(p) for p in wanted],
        source=gather(round_trip_probe),
        recorded_at=recorded_at,
    )


def _path(run_ids: pd.Series, paths: dict[int, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The vCPUs the runs' pinned clients and servers ran on (client first); None when a
    run did not record them."""
    got = [paths.get(int(r)) for r in run_ids]
    if not got or any(g is None for g in got):
        return None
    return tuple(dict.fromkeys(c for g in got if g is not None for c in g))


def _one_match(configs: pd.DataFrame, option: str, selector: str) -> pd.Series:
    """The one configuration a KEY=VAL selector matches; UsageError for none or several."""
    hits = configs[[matches(str(c), "", selector, option) for c in configs["config"]]]
    if len(hits) != 1:
        raise UsageError(
            f"{option} {selector} matches {len(hits)} configurations; one is needed (have: "
            f"{'; '.join(configs['config'])})"
        )
    return hits.iloc[0]


def _pick_config(
    configs: pd.DataFrame, ok: pd.DataFrame, profiled: set[Any], selector: str | None
) -> pd.Series:
    with_profile = set(ok.loc[ok["run_id"].isin(profiled), "config"])
    if selector is None:
        cands = configs[configs["config"].isin(with_profile)]
        if cands.empty:
            # Exit 1, as `vmtax exits` says it: the store lacks the profile, the input is fine.
            raise VmtaxError(
                "no configuration in the selection has an exit profile; record them with "
                "vmtax run --exits"
            )
        return cands.iloc[int(np.argmax(cands["level"].map(level_number).to_numpy()))]
    row = _one_match(configs, "--config", selector)
    if row["config"] not in with_profile:
        raise VmtaxError(f"{row['config']} has no exit profile; record one with vmtax run --exits")
    return row


def _pick_baseline(configs: pd.DataFrame, level: int, selector: str | None) -> str:
    if selector is None:
        below = configs[configs["level"].map(level_number) == level - 1]
        if len(below) != 1:
            raise UsageError(
                f"L{level} needs a baseline one level down (L{level - 1}): the selection has "
                f"{len(below)}; pick one with --baseline"
            )
        return str(below["config"].iloc[0])
    row = _one_match(configs, "--baseline", selector)
    if level_number(row["level"]) != level - 1:
        raise UsageError(
            f"--baseline {selector} is {row['level']}, not one level below L{level} "
            f"(L{level - 1}): explain splits the cost of one level"
        )
    return str(row["config"])


def from_store(
    store: Store,
    selectors: Sequence[str],
    **options: Any,  # noqa: ANN401
) -> Selection:
    """``select`` on the runs the selectors pick and their experiments' exit profiles."""
    runs = store.runs(list(selectors) or ["exp=latest"])
    if runs.empty:
        raise UsageError(f"no runs match {' '.join(selectors) or 'exp=latest'}")
    tsc = tsc_rates(store, runs)
    experiments = sorted(set(runs["experiment_id"]))
    frames = [exit_profiles(store, int(e)) for e in experiments]
    frames = [f for f in frames if len(f)]
    profiles = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    profiles = profiles[profiles["run_id"].isin(runs["run_id"])]
    splits = [f for f in (vcpu_counts(store, int(e)) for e in experiments) if len(f)]
    vcpus = pd.concat(splits, ignore_index=True) if splits else pd.DataFrame(columns=VCPU_COLUMNS)
    paths = {r: c for e in experiments for r, c in path_cpus(store, int(e)).items()}
    return select(runs, profiles, tsc, vcpus=vcpus, paths=paths, **options)

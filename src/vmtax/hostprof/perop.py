"""A profile per operation: each profiled run's exits and handling time per operation by
reason, as one hypervisor level recorded them (``explain`` and the model's out-of-sample
predictions read profiles this way)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vmtax.hostprof.groups import group_of

#: Reasons whose recorded time is the vCPU waiting (halted), not the hypervisor working.
HALT_REASONS = ("hlt", "idle_hlt", "mwait", "mwait_cond", "mwait_instruction", "umwait", "tpause")
#: Columns of ``per_reason``.
REASON_COLUMNS = ["run_id", "reason", "group", "exits_per_op", "handling_ns", "basis"]


def per_reason(profiles: pd.DataFrame, recorded_at: str) -> pd.DataFrame:
    """Per (run, reason) of the complete profiles recorded at ``recorded_at``: exits and
    handling ns per operation (the agent start-up's exits taken off), and how the handling
    was had: ``timed``, ``untimed`` (the run's mean per timed exit), ``halt`` (none) or
    ``counted`` (none: KVM's counters, ``--exits`` without ``=trace``, give no time)."""
    done = profiles[profiles["complete"].astype(bool) & (profiles["recorded_at"] == recorded_at)]
    done = done.dropna(subset=["reason"])
    rows = []
    for run_key, run in done.groupby("run_id"):
        run_id = int(str(run_key))
        iterations = float(run["iterations"].max())
        if iterations <= 0:
            continue
        net = (run["count"] - run["startup"]).clip(lower=0).to_numpy(dtype=np.float64)
        timed = run["timed"].to_numpy(dtype=np.float64)
        time_ns = run["time_ns"].to_numpy(dtype=np.float64)
        halt = np.array(
            [
                g == "Halt" or str(r).lower() in HALT_REASONS
                for g, r in zip(run["group"], run["reason"], strict=True)
            ]
        )
        usable = (timed > 0) & ~halt
        mean_per_exit = time_ns[usable].sum() / timed[usable].sum() if usable.any() else 0.0
        per_exit = np.where(usable, time_ns / np.where(timed > 0, timed, 1.0), mean_per_exit)
        per_exit = np.where(halt, 0.0, per_exit)
        counted = "recorder" in run and (run["recorder"] == "kvm-stats").all()
        untimed = "counted" if counted else "untimed"
        basis = np.where(halt, "halt", np.where(usable, "timed", untimed))
        for reason, group, n, cost, how in zip(
            run["reason"], run["group"], net, per_exit, basis, strict=True
        ):
            rows.append([run_id, str(reason), str(group), n / iterations,
                         n * cost / iterations, str(how)])  # fmt: skip
    return pd.DataFrame(rows, columns=REASON_COLUMNS)


#: Columns of ``per_vcpu_reason``.
VCPU_REASON_COLUMNS = ["vcpu", *REASON_COLUMNS]


def per_vcpu_reason(profiles: pd.DataFrame, vcpus: pd.DataFrame, recorded_at: str) -> pd.DataFrame:
    """``per_reason`` for each vCPU of the runs ``vcpus`` (``hostprof.store.vcpu_counts``)
    splits: the same exits and handling per operation, by the vCPU that made them."""
    done = profiles[profiles["complete"].astype(bool) & (profiles["recorded_at"] == recorded_at)]
    runs = done.groupby("run_id").agg(
        iterations=("iterations", "max"), recorder=("recorder", "first")
    )
    mine = vcpus[(vcpus["recorded_at"] == recorded_at) & vcpus["run_id"].isin(runs.index)]
    if mine.empty:
        return pd.DataFrame(columns=VCPU_REASON_COLUMNS)
    frame = mine.join(runs, on="run_id").assign(
        complete=True, group=[group_of(str(r)) for r in mine["reason"]]
    )
    out = []
    for vcpu, sub in frame.groupby("vcpu"):
        got = per_reason(sub, recorded_at)
        out.append(got.assign(vcpu=int(str(vcpu))))
    return pd.concat(out, ignore_index=True)[VCPU_REASON_COLUMNS]

"""Read and write exit profiles (tables ``exit_profiles`` and ``exit_counts``).

``exit_profiles(store, experiment_id)`` is the one read API: the nested-cost model and the
report take its DataFrame, so its column names are part of the interface.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from vmtax.hostprof.groups import group_of
from vmtax.hostprof.reasons import reason_name

if TYPE_CHECKING:
    from vmtax.store import Store


class ExitCounts(Protocol):
    def counts(self, experiment_id: int) -> pd.DataFrame: ...


class ExitSource(Protocol):
    """What :func:`exit_profiles` reads: a ``Store``, or the read-only
    ``store.reader.StoreReader``, whose ``exits.counts`` answer alike."""

    @property
    def exits(self) -> ExitCounts: ...


#: Columns of ``exit_profiles()``; one row per (run, recording level, reason).
COLUMNS = [
    "experiment_id", "config_key", "level", "probe", "run_id", "run_status", "recorded_at",
    "recorder", "isa", "reason", "code", "group", "count", "time_ns", "timed", "iterations",
    "complete", "dropped", "problems", "startup",
]  # fmt: skip


def save_profile(
    store: Store, run_id: int, recorded_at: str, profile: dict[str, Any], recorder: str = "tracefs"
) -> int:
    """Store one profile (the JSON ``vmtax-probe exits stop`` prints, or a failed recording:
    ``{"complete": false, "problems": [...]}``) for ``run_id``; returns its id.

    Unknown codes are kept under ``unknown N``; a profile with dropped events, problems or a
    reason the tables do not know stays stored and is marked incomplete.
    """
    isa = str(profile.get("isa") or "")
    problems = [str(p) for p in profile.get("problems") or []]
    reasons = list(profile.get("reasons") or [])
    # A reason with a name is a KVM counter (``kvmstats``); the others are exit codes.
    names = {
        int(r["code"]): str(r.get("name") or reason_name(isa, int(r["code"]))) for r in reasons
    }
    unknown = [c for c, n in names.items() if n.startswith("unknown")]
    if unknown:
        problems.append(f"unknown exit codes {', '.join(map(str, unknown))} (isa {isa or '?'})")
    dropped = int(profile.get("dropped") or 0)
    if dropped and not any("dropped" in p for p in problems):
        problems.append(f"{dropped} events were dropped")
    complete = bool(profile.get("complete", False)) and not problems and dropped == 0
    row = {
        "run_id": int(run_id),
        "recorded_at": recorded_at,
        "recorder": recorder,
        "isa": isa or None,
        "hits": profile.get("hits"),
        "dropped": dropped,
        "window_ns": profile.get("window_ns"),
        "complete": complete,
        "problems": problems or None,
        "detail": _detail(profile),
        "created_at": datetime.now(UTC),
    }
    counts = [
        {
            "code": int(r["code"]),
            "reason": names[int(r["code"])],
            "count": int(r.get("count") or 0),
            "time_ns": None if r.get("time_ns") is None else int(r["time_ns"]),
            "timed": None if r.get("timed") is None else int(r["timed"]),
        }
        for r in reasons
    ]
    return store.exits.add(row, counts)


def _detail(profile: dict[str, Any]) -> dict[str, Any] | None:
    keep = ("threads", "timed", "untimed", "vcpus", "kvm_stats", "by_vcpu", "teardown")
    out: dict[str, Any] = {k: profile[k] for k in keep if k in profile}
    if profile.get("startup") is not None:
        out["startup"] = {str(int(c)): int(n) for c, n in dict(profile["startup"]).items()}
    return out or None


def exit_profiles(store: ExitSource, experiment_id: int) -> pd.DataFrame:
    """Every stored exit count of an experiment, one row per (run, recording level, reason).

    ``iterations`` is what the probe executed in the run, warm-up included (measured plus
    warm-up samples), so ``count / iterations`` is exits per iteration. A profile with no
    counts (its recording failed) appears as one row with reason None and count 0.
    """
    df = store.exits.counts(experiment_id)
    df["group"] = [group_of(x) if isinstance(x, str) else None for x in df["reason"]]
    # Exits of one agent start-up (measured once per configuration before its first run),
    # per reason: what ``count`` holds besides the probe's own iterations.
    df["startup"] = [
        int(((d or {}).get("startup") or {}).get(str(int(c)), 0)) if pd.notna(c) else 0
        for d, c in zip(df["detail"], df["code"], strict=True)
    ]
    for col in ("count", "time_ns", "timed", "iterations", "dropped"):
        df[col] = pd.to_numeric(df[col]).fillna(0).astype("int64")
    df["complete"] = df["complete"].astype(bool)
    return df[COLUMNS].reset_index(drop=True)


def kvm_counters(store: Store, experiment_id: int) -> pd.DataFrame:
    """KVM's own exit counters of every profiled run, one row per (run, recording level,
    counter): from a counts profile's rows, or from the readings a trace profile took beside
    its histograms (its detail's ``kvm_stats``). ``exits`` is KVM's count of every exit."""
    rows = store.exits.profiles(experiment_id)
    profiles = exit_profiles(store, experiment_id)
    out = []
    for run_id, probe, level, recorder, hits, detail in rows:
        if recorder == "kvm-stats":
            mine = profiles[(profiles["run_id"] == run_id) & (profiles["recorded_at"] == level)]
            counts = dict(zip(mine["reason"].dropna(), mine["count"], strict=False))
            counts["exits"] = int(hits or 0)
        else:
            counts = dict((detail or {}).get("kvm_stats") or {})
        for name, n in counts.items():
            out.append([run_id, probe, level, recorder, str(name), int(n)])
    columns = ["run_id", "probe", "recorded_at", "recorder", "counter", "count"]
    return pd.DataFrame(out, columns=columns)


#: Columns of ``vcpu_counts()``; one row per (run, recording level, vCPU, reason).
VCPU_COLUMNS = [
    "run_id", "recorded_at", "vcpu", "code", "reason", "count", "time_ns", "timed", "startup",
]  # fmt: skip


def vcpu_counts(store: Store, experiment_id: int) -> pd.DataFrame:
    """Each traced profile's exits per vCPU (KVM's ``vcpu_id``) and reason, from its detail's
    ``by_vcpu``; profiles recorded before the histograms were keyed by the vCPU, or by a
    kernel whose ``kvm_exit`` has no ``vcpu_id``, have no rows.

    ``startup`` is the reason's start-up exits (measured once per configuration, all vCPUs
    together) shared out over the vCPUs in proportion to their counts in the run, so the
    vCPUs' net exits add up to the profile's."""
    profiles = exit_profiles(store, experiment_id)
    startup = {
        (int(r), str(a), int(c)): int(s)
        for r, a, c, s in zip(
            profiles["run_id"], profiles["recorded_at"], profiles["code"].fillna(-1),
            profiles["startup"], strict=True,
        )
    }  # fmt: skip
    isa = dict(zip(profiles["run_id"], profiles["isa"].fillna(""), strict=True))
    rows = []
    for run_id, _probe, level, _recorder, _hits, detail in store.exits.profiles(experiment_id):
        split = (detail or {}).get("by_vcpu") or {}
        totals: dict[int, int] = {}
        for reasons in split.values():
            for r in reasons:
                totals[int(r["code"])] = totals.get(int(r["code"]), 0) + int(r.get("count") or 0)
        for vcpu, reasons in split.items():
            for r in reasons:
                code, n = int(r["code"]), int(r.get("count") or 0)
                whole = startup.get((int(run_id), str(level), code), 0)
                share = whole * n / totals[code] if totals.get(code) else 0.0
                name = reason_name(str(isa.get(run_id) or ""), code)
                time_ns, timed = int(r.get("time_ns") or 0), int(r.get("timed") or 0)
                rows.append(
                    [int(run_id), str(level), int(vcpu), code, name, n, time_ns, timed, share]
                )
    return pd.DataFrame(rows, columns=VCPU_COLUMNS)


def path_cpus(store: Store, experiment_id: int) -> dict[int, tuple[int, ...]]:
    """Per profiled run whose agent pinned a client and its server (``--cpus``): the CPUs
    they ran on, client first, as the run's summary recorded them."""
    out: dict[int, tuple[int, ...]] = {}
    for run_id, extra in store.exits.run_extras(experiment_id):
        got = dict((extra or {}).get("extra") or {})
        if "client_cpu" in got and "server_cpu" in got:
            cpus = (int(got["client_cpu"]), int(got["server_cpu"]))
            out[int(run_id)] = tuple(dict.fromkeys(cpus))
    return out

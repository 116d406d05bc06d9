"""A noise profile: per machine, configuration, probe and metric, the variance components of
the log run means (with their sources), the boot and run costs they were measured with, and
when it was made and last grown.

The **machine** is the environment fingerprint of the machine vmtax runs on, reduced to what
names it and does not move from one run to the next (:data:`MACHINE_FIELDS`: host name,
architecture, CPU model, vendor and count, memory, kernel, hypervisor under it); its key is
the SHA-256 of those fields as canonical JSON. The TSC rate, steal ticks and the CPUID
timing of the nesting estimate are left out: they are measurements, and differ every time.

The **configuration** is a guest configuration's labels as the request names it (level,
preset, accelerators, guest network, the user's labels; never ``set``, which only tells
apart the two sides of an A/A test of one configuration). Its key is ``config_key`` of the
store: the level, then the sorted ``k=v`` labels.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from vmtax.noise.components import Components, Source

#: The fingerprint fields that name a machine (dotted paths into the agent's ``env``).
MACHINE_FIELDS = (
    "hostname", "arch", "cpu.model", "cpu.vendor", "cpu.logical_cpus", "memory_bytes",
    "kernel", "hypervisor.vendor",
)  # fmt: skip
#: The metric a profile describes: the run mean, the headline of every probe.
METRIC = "mean"


class ProfileError(ValueError):
    """A stored profile that cannot be read back (corrupt or from another format)."""


def machine_fields(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of :data:`MACHINE_FIELDS` found in an environment fingerprint."""
    out: dict[str, Any] = {}
    for path in MACHINE_FIELDS:
        value: Any = fingerprint
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        out[path] = value
    return out


def machine_key(fields: Mapping[str, Any]) -> str:
    """The key of a machine: SHA-256 of its fields as canonical JSON (hex, 64 characters)."""
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def configuration_key(labels: Mapping[str, str]) -> str:
    """``level k=v ...`` of a configuration's profile labels (``level`` is one of them)."""
    rest = {k: v for k, v in labels.items() if k != "level"}
    return " ".join([str(labels.get("level", "?")), *(f"{k}={rest[k]}" for k in sorted(rest))])


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """``field: a vs b`` for every field two machines (or configurations) differ in."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)} vs {b.get(k)}" for k in keys if a.get(k) != b.get(k)]


@dataclass(frozen=True)
class ProbeProfile:
    """One stored row: one probe's components in one machine and configuration."""

    machine: str
    machine_fields: dict[str, Any]
    configuration: str
    labels: dict[str, str]
    probe: str
    components: Components
    boot_cost_s: float | None
    run_cost_s: float | None
    made_at: datetime
    updated_at: datetime
    metric: str = METRIC
    id: int | None = field(default=None, compare=False)

    @property
    def experiments(self) -> list[int]:
        return [s.experiment_id for s in self.components.sources if s.experiment_id is not None]

    def folded(
        self, more: Source, *, boot_cost_s: float | None, run_cost_s: float | None, now: datetime
    ) -> ProbeProfile:
        """This profile grown by one more experiment; its costs become the runs-weighted
        mean of the old and the new (a cost not measured leaves the old one)."""
        old_runs, new_runs = self.components.runs, more.runs
        return replace(
            self,
            components=self.components.folded(more),
            boot_cost_s=_mix(self.boot_cost_s, boot_cost_s, old_runs, new_runs),
            run_cost_s=_mix(self.run_cost_s, run_cost_s, old_runs, new_runs),
            updated_at=now,
        )

    def row(self) -> dict[str, Any]:
        """The values of its ``noise_profiles`` row (see ``store.noise``)."""
        c = self.components
        b, w = c.between_interval(), c.within_interval()
        return {
            "machine": self.machine,
            "machine_fields": dict(self.machine_fields),
            "configuration": self.configuration,
            "labels": dict(self.labels),
            "probe": self.probe,
            "metric": self.metric,
            "between": c.between,
            "between_low": b.low,
            "between_high": b.high,
            "df_between": c.df_between,
            "within": c.within,
            "within_low": w.low,
            "within_high": w.high,
            "df_within": float(c.df_within),
            "boots": c.boots,
            "runs": c.runs,
            "boot_cost_s": self.boot_cost_s,
            "run_cost_s": self.run_cost_s,
            "sources": [s.to_dict() for s in c.sources],
            "made_at": self.made_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ProbeProfile:
        """A profile read back from its row; :class:`ProfileError` when the row is corrupt
        (its sums of squares are what is trusted; the stored estimates are recomputed)."""
        try:
            raw = row["sources"]
            if not isinstance(raw, list) or not raw:
                raise ValueError("no sources")
            comps = Components(tuple(Source.from_dict(s) for s in raw))
            if not (math.isfinite(comps.within) and comps.within >= 0):
                raise ValueError(f"within-boot variance {comps.within}")
            fields = row["machine_fields"]
            labels = row["labels"]
            if not isinstance(fields, dict) or not isinstance(labels, dict):
                raise ValueError("machine fields and labels must be objects")
            return cls(
                machine=str(row["machine"]),
                machine_fields=dict(fields),
                configuration=str(row["configuration"]),
                labels={str(k): str(v) for k, v in labels.items()},
                probe=str(row["probe"]),
                metric=str(row["metric"]),
                components=comps,
                boot_cost_s=_cost(row.get("boot_cost_s")),
                run_cost_s=_cost(row.get("run_cost_s")),
                made_at=_utc(row["made_at"]),
                updated_at=_utc(row["updated_at"]),
                id=row.get("id"),
            )
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            probe = row.get("probe", "?") if isinstance(row, Mapping) else "?"
            raise ProfileError(f"noise profile of {probe}: unreadable ({exc})") from None

    def summary(self) -> dict[str, Any]:
        """What `vmtax calibrate show` prints of it (JSON-ready)."""
        c = self.components
        b, w = c.between_interval(), c.within_interval()
        return {
            "machine": self.machine[:12],
            "host": self.machine_fields.get("hostname"),
            "configuration": self.configuration,
            "probe": self.probe,
            "metric": self.metric,
            "between": c.between,
            "between_ci": [b.low, b.high],
            "df_between": round(c.df_between, 2),
            "within": c.within,
            "within_ci": [w.low, w.high],
            "df_within": c.df_within,
            "between_share": c.between_share,
            "boots": c.boots,
            "runs": c.runs,
            "experiments": self.experiments,
            "boot_cost_s": self.boot_cost_s,
            "run_cost_s": self.run_cost_s,
            "made_at": self.made_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def _utc(at: Any) -> datetime:
    # SQLite hands timestamps back without their zone; they were written in UTC.
    if not isinstance(at, datetime):
        raise ValueError(f"a time must be a timestamp, got {at!r}")
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _cost(value: Any) -> float | None:
    if value is None:
        return None
    x = float(value)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"a cost must be a positive number of seconds, got {value!r}")
    return x


def _mix(old: float | None, new: float | None, n_old: int, n_new: int) -> float | None:
    if new is None or not math.isfinite(new) or new <= 0:
        return old
    if old is None:
        return new
    return (old * n_old + new * n_new) / (n_old + n_new)

"""The explain use case (`vmtax explain`): a level's overhead per operation over the level
below, split by exit reason group, from the stored runs and exit profiles (docs/model.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vmtax.errors import VmtaxError
from vmtax.store import Store

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Explained:
    """The split (one row per probe and exit group, then the residual) and what it is of:
    the configuration and its baseline, where the profiles were recorded, the round trip's
    probe, and whether the profiles are counts without handling times. ``vcpus`` is the
    split by vCPU (``vmtax.explain.split``), empty when no profile says which vCPU made
    each exit."""

    rows: pd.DataFrame
    vcpus: pd.DataFrame
    config: str
    baseline: str
    recorded_at: str
    round_trip_probe: str
    counted: bool


def explain_overhead(
    selectors: list[str],
    *,
    config: str | None = None,
    baseline: str | None = None,
    probes: list[str] | None = None,
    round_trip_probe: str = "cpuid",
    db: str | None = None,
) -> Explained:
    """Explain ``config``'s overhead over ``baseline`` (defaults: the highest profiled level
    and the one configuration below it) for the runs ``selectors`` pick."""
    # heavy: scipy, only for this command
    from vmtax.explain import explain, split
    from vmtax.explain.inputs import from_store

    with Store.open(db, read_only=True) as store:
        chosen = from_store(
            store, selectors, config=config, baseline=baseline, probes=probes or [],
            round_trip_probe=round_trip_probe,
        )  # fmt: skip
    try:
        rows = explain(chosen.probes, chosen.source)
        vcpus = split(chosen.probes, chosen.source)
    except ValueError as exc:
        raise VmtaxError(str(exc)) from None
    return Explained(
        rows=rows,
        vcpus=vcpus,
        config=str(chosen.config),
        baseline=str(chosen.baseline),
        recorded_at=str(chosen.recorded_at),
        round_trip_probe=str(chosen.source.probe),
        counted=any((p.reasons["basis"] == "counted").any() for p in chosen.probes),
    )

"""The exits use case: one experiment's exit profiles in study E's Table 2 shape, or a
published table of that shape."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from vmtax.errors import VmtaxError
from vmtax.experiment.lookup import experiment_id
from vmtax.hostprof.store import exit_profiles
from vmtax.hostprof.table import published as published_table
from vmtax.hostprof.table import table2
from vmtax.store import Store


@dataclass(frozen=True)
class ExitTable:
    """An experiment's profiles as stored and the table made of them (rows ``by``)."""

    exp_id: int
    profiles: pd.DataFrame
    frame: pd.DataFrame


def _experiment(store: Store, ref: str) -> int:
    ref = ref.strip()
    for prefix in ("exp=", "experiment="):
        if ref.lower().startswith(prefix):
            ref = ref[len(prefix) :]
    return experiment_id(store, ref)


def exit_table(ref: str, *, by: str, baseline: str | None, db: str | None) -> ExitTable:
    """The profiles of experiment ``ref`` (N, latest, exp=N), by reason or group, as shares
    of the ``baseline`` configuration's total; VmtaxError when it recorded none."""
    with Store.open(db, read_only=True) as store:
        exp_id = _experiment(store, ref)
        profiles = exit_profiles(store, exp_id)
    if profiles.empty:
        raise VmtaxError(
            f"experiment {exp_id} has no exit profiles; record them with vmtax run --exits"
        )
    return ExitTable(exp_id, profiles, table2(profiles, by=by, baseline=baseline))


def published(name: str) -> pd.DataFrame:
    """A published exit-profile table (e.g. virtage_table2) in the same shape."""
    return published_table(name)

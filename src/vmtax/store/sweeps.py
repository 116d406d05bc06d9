"""Sweep steps and their samples in the store (tables ``sweep_steps`` and ``sweep_samples``):
what a sweep stores through ``vmtax.execution.Storing`` and what ``vmtax sweep show`` reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import select
from sqlalchemy.engine import Connection

from vmtax.store.models import Experiment, SweepSample, SweepStep
from vmtax.store.repository import Repository, inserted_id


class SweepRepository(Repository):
    """Reached as ``store.sweeps``."""

    def add_step(self, step: dict[str, Any], samples: Sequence[dict[str, Any]]) -> int:
        """Insert one step row and its samples (numbered in order) in one transaction, so a
        step is committed whole or not at all; its id."""

        def insert(connection: Connection) -> int:
            step_id = inserted_id(connection.execute(SweepStep.__table__.insert().values(**step)))
            if samples:
                connection.execute(
                    SweepSample.__table__.insert(),
                    [{"step_id": step_id, "seq": i, **s} for i, s in enumerate(samples)],
                )
            return step_id

        return self._write(insert)

    def committed_steps(self, experiment_id: int) -> set[int]:
        """Indices of the steps of a sweep stored as ``ok``."""
        t = SweepStep.__table__
        query = select(t.c.step_index).where(t.c.experiment_id == experiment_id, t.c.status == "ok")
        return self._read(lambda connection: {int(r[0]) for r in connection.execute(query)})

    def steps(self, experiment_id: int) -> pd.DataFrame:
        """Every stored step of a sweep (ok and failed), in step order."""
        t = SweepStep.__table__
        query = select(t).where(t.c.experiment_id == experiment_id).order_by(t.c.step_index, t.c.id)
        rows = self._read(lambda connection: connection.execute(query).mappings().all())
        return pd.DataFrame(rows, columns=list(t.c.keys()))

    def samples(self, step_ids: Sequence[int]) -> pd.DataFrame:
        """The samples of the given steps, in order."""
        t = SweepSample.__table__
        columns = list(t.c.keys())
        if not step_ids:
            return pd.DataFrame(columns=columns)
        query = (
            select(t)
            .where(t.c.step_id.in_([int(i) for i in step_ids]))
            .order_by(t.c.step_id, t.c.seq)
        )
        rows = self._read(lambda connection: connection.execute(query).mappings().all())
        return pd.DataFrame(rows, columns=columns)

    def latest(self) -> int | None:
        """The id of the newest sweep, or None when the store holds none."""
        t = Experiment.__table__
        query = select(t.c.id).where(t.c.suite == "sweep").order_by(t.c.id.desc()).limit(1)
        found = self._read(lambda connection: connection.execute(query).scalar())
        return None if found is None else int(found)

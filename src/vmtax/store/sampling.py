"""Adaptive sampling in the store (tables ``sampling_looks`` and ``sampling_outcomes``, and
the runs its looks judge): the queries behind ``vmtax.sampling``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from vmtax.store.repository import Repository

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

# The queries below import SQLAlchemy and the models where they run: `vmtax compare` reads
# OUTCOME_COLUMNS (vmtax.sampling.outcome) and, from a SQLite store, the outcomes through
# store.reader, without SQLAlchemy.

#: Columns of :meth:`SamplingRepository.outcomes`.
OUTCOME_COLUMNS = [
    "configuration_id", "experiment_id", "config", "level", "probe", "n_runs", "mean",
    "half_width", "target", "status", "reason", "duration_s", "iterations",
]  # fmt: skip

#: Columns of :meth:`SamplingRepository.runs`.
RUN_COLUMNS = ["probe", "status", "mean", "plan_index", "boot_id", "wall_s"]


class SamplingRepository(Repository):
    """Reached as ``store.sampling``."""

    def runs(self, experiment_id: int, configuration_id: int) -> pd.DataFrame:
        """What a look judges of one configuration's runs (``RUN_COLUMNS``)."""
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from sqlalchemy import select

        from vmtax.store.models import Run  # heavy: the ORM models

        t = Run.__table__
        stmt = select(*(t.c[c] for c in RUN_COLUMNS)).where(
            t.c.experiment_id == experiment_id, t.c.configuration_id == configuration_id
        )
        rows = self._read(lambda connection: connection.execute(stmt).all())
        return pd.DataFrame(rows, columns=RUN_COLUMNS)

    def add_look(self, look: dict[str, Any]) -> None:
        """Store one look: its decisions and the noise sampled around the runs it judged."""
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from vmtax.store.models import SamplingLook

        self._write(
            lambda connection: connection.execute(SamplingLook.__table__.insert().values(**look))
        )

    def set_outcomes(self, configuration_id: int, outcomes: Sequence[dict[str, Any]]) -> None:
        """Replace a configuration's outcomes with ``outcomes``, in one transaction."""
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from sqlalchemy import delete

        from vmtax.store.models import SamplingOutcome  # heavy: the ORM models

        t = SamplingOutcome.__table__

        def replace(connection: Connection) -> None:
            connection.execute(delete(t).where(t.c.configuration_id == configuration_id))
            if outcomes:
                connection.execute(t.insert(), list(outcomes))

        # Deleting then inserting the same rows gives the same table when repeated.
        self._write(replace, repeatable=True)

    def resume_point(self, experiment_id: int) -> tuple[float | None, int | None]:
        """The most budget seconds a stored look of an experiment had spent and its highest
        stored plan index (None when there is none)."""
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from sqlalchemy import func, select

        from vmtax.store.models import Run, SamplingLook  # heavy: the ORM models

        looks, runs = SamplingLook.__table__, Run.__table__

        def query(connection: Connection) -> tuple[float | None, int | None]:
            spent = connection.execute(
                select(func.max(looks.c.spent_s)).where(looks.c.experiment_id == experiment_id)
            ).scalar()
            top = connection.execute(
                select(func.max(runs.c.plan_index)).where(runs.c.experiment_id == experiment_id)
            ).scalar()
            return spent, top

        return self._read(query)

    def outcomes(self, experiment_ids: Sequence[int]) -> pd.DataFrame:
        """One row per (configuration, probe) that adaptive sampling finished in the given
        experiments, with the configuration's key and level (``OUTCOME_COLUMNS``)."""
        if not experiment_ids:
            return pd.DataFrame(columns=OUTCOME_COLUMNS)
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from sqlalchemy import select

        from vmtax.store.models import Configuration, SamplingOutcome  # heavy: the ORM models

        o, c = SamplingOutcome.__table__, Configuration.__table__
        stmt = (
            select(
                o.c.configuration_id,
                o.c.experiment_id,
                c.c.config_key,
                c.c.level,
                o.c.probe,
                o.c.n_runs,
                o.c.mean,
                o.c.half_width,
                o.c.target,
                o.c.status,
                o.c.reason,
                o.c.duration_s,
                o.c.iterations,
            )  # fmt: skip
            .join(c, c.c.id == o.c.configuration_id)
            .where(o.c.experiment_id.in_([int(i) for i in experiment_ids]))
            .order_by(o.c.configuration_id, o.c.probe)
        )
        rows = self._read(lambda connection: connection.execute(stmt).all())
        return pd.DataFrame(rows, columns=OUTCOME_COLUMNS)

    def noise(self, experiment_id: int) -> list[tuple[int, Any, Any]]:
        """(configuration_id, noise_before, noise_after) of every look of an experiment, in
        the order they were stored."""
        # heavy: SQLAlchemy and the models, only where the store is queried through them
        from sqlalchemy import select

        from vmtax.store.models import SamplingLook  # heavy: the ORM models

        t = SamplingLook.__table__
        stmt = (
            select(t.c.configuration_id, t.c.noise_before, t.c.noise_after)
            .where(t.c.experiment_id == experiment_id)
            .order_by(t.c.id)
        )
        return self._read(
            lambda connection: [(int(c), b, a) for c, b, a in connection.execute(stmt)]
        )

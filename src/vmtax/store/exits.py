"""Exit profiles in the store (tables ``exit_profiles`` and ``exit_counts``): the queries
behind ``vmtax.hostprof.store``, which names the reasons and shapes the frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from vmtax.store.models import Configuration, ExitCount, ExitProfile, Run, SampleBlock
from vmtax.store.repository import Repository, inserted_id


class ExitRepository(Repository):
    """Reached as ``store.exits``."""

    def add(self, profile: dict[str, Any], counts: Sequence[dict[str, Any]]) -> int:
        """Insert one profile row and its per-reason counts in one transaction; its id."""

        def insert(connection: Connection) -> int:
            pid = inserted_id(connection.execute(ExitProfile.__table__.insert().values(**profile)))
            if counts:
                connection.execute(
                    ExitCount.__table__.insert(), [{"profile_id": pid, **c} for c in counts]
                )
            return pid

        return self._write(insert)

    def counts(self, experiment_id: int) -> pd.DataFrame:
        """Every stored exit count of an experiment joined to its run, configuration and
        iterations executed: one row per (run, recording level, reason), or one row with
        reason None for a profile without counts."""
        p, c, r, cfg, s = (
            ExitProfile.__table__,
            ExitCount.__table__,
            Run.__table__,
            Configuration.__table__,
            SampleBlock.__table__,
        )
        samples = (
            select(s.c.run_id, func.sum(s.c.count).label("iterations"))
            .group_by(s.c.run_id)
            .subquery()
        )
        stmt = (
            select(
                r.c.experiment_id,
                cfg.c.config_key,
                cfg.c.level,
                r.c.probe,
                r.c.id.label("run_id"),
                r.c.status.label("run_status"),
                p.c.recorded_at,
                p.c.recorder,
                p.c.isa,
                c.c.reason,
                c.c.code,
                c.c.count,
                c.c.time_ns,
                c.c.timed,
                samples.c.iterations,
                p.c.complete,
                p.c.dropped,
                p.c.problems,
                p.c.detail,
            )  # fmt: skip
            .select_from(
                p.join(r, r.c.id == p.c.run_id)
                .join(cfg, cfg.c.id == r.c.configuration_id)
                .outerjoin(c, c.c.profile_id == p.c.id)
                .outerjoin(samples, samples.c.run_id == r.c.id)
            )
            .where(r.c.experiment_id == int(experiment_id))
            .order_by(r.c.id, p.c.recorded_at, c.c.code)
        )
        rows = self._read(lambda connection: connection.execute(stmt).all())
        return pd.DataFrame(rows, columns=list(stmt.selected_columns.keys()))

    def profiles(self, experiment_id: int) -> list[tuple[Any, ...]]:
        """(run_id, probe, recorded_at, recorder, hits, detail) of every profile of an
        experiment, by run and recording level."""
        p, r = ExitProfile.__table__, Run.__table__
        stmt = (
            select(p.c.run_id, r.c.probe, p.c.recorded_at, p.c.recorder, p.c.hits, p.c.detail)
            .select_from(p.join(r, r.c.id == p.c.run_id))
            .where(r.c.experiment_id == int(experiment_id))
            .order_by(p.c.run_id, p.c.recorded_at)
        )
        return self._read(lambda connection: [tuple(row) for row in connection.execute(stmt)])

    def run_extras(self, experiment_id: int) -> list[tuple[Any, ...]]:
        """(run_id, summary_extra) of every run of an experiment with an exit profile: what
        its summary recorded beyond the statistics (e.g. the CPUs of a pinned client and
        server)."""
        p, r = ExitProfile.__table__, Run.__table__
        stmt = (
            select(r.c.id, r.c.summary_extra)
            .where(r.c.experiment_id == int(experiment_id))
            .where(r.c.id.in_(select(p.c.run_id)))
            .order_by(r.c.id)
        )
        return self._read(lambda connection: [tuple(row) for row in connection.execute(stmt)])

"""Noise profiles in the store (table ``noise_profiles``), and the runs a profile is learnt
from: the queries behind ``vmtax.noise`` (what the rows mean lives there)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import Text, and_, cast, delete, or_, select
from sqlalchemy.engine import Connection

from vmtax.store.models import NoiseProfile, Run
from vmtax.store.repository import Repository

#: Columns of :meth:`NoiseRepository.experiment_runs`.
RUN_COLUMNS = [
    "configuration_id", "probe", "status", "mean", "boot_id", "wall_s", "started_ns",
    "ended_ns", "plan_index",
]  # fmt: skip
_JSON = ("machine_fields", "labels", "sources")
#: The most profile rows one read returns (a store holds a few per machine, configuration
#: and probe); a read is bounded like every other.
MAX_ROWS = 100_000


class NoiseRepository(Repository):
    """Reached as ``store.noise``."""

    def rows(self, machine: str | None = None) -> list[dict[str, Any]]:
        """Every stored profile row (of one machine when given), as plain values. A JSON
        column that does not parse comes back as None, for the reader to refuse that row
        alone (``vmtax.noise.profile.ProbeProfile.from_row``)."""
        t = NoiseProfile.__table__
        cols = [cast(c, Text).label(c.name) if c.name in _JSON else c for c in t.c]
        stmt = select(*cols).order_by(t.c.machine, t.c.configuration, t.c.probe, t.c.metric)
        if machine is not None:
            stmt = stmt.where(t.c.machine == machine)
        stmt = stmt.limit(MAX_ROWS)
        rows = self._read(lambda connection: connection.execute(stmt).mappings().all())
        out = []
        for row in rows:
            item = dict(row)
            for name in _JSON:
                item[name] = _loads(item[name])
            out.append(item)
        return out

    def save(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write ``rows`` (``ProbeProfile.row()``), each replacing the row of its machine,
        configuration, probe and metric, in one transaction."""
        t = NoiseProfile.__table__

        def replace(connection: Connection) -> None:
            keys = [
                and_(
                    t.c.machine == r["machine"],
                    t.c.configuration == r["configuration"],
                    t.c.probe == r["probe"],
                    t.c.metric == r["metric"],
                )
                for r in rows
            ]
            if keys:
                connection.execute(delete(t).where(or_(*keys)))
                connection.execute(t.insert(), [_json_ready(r) for r in rows])

        # Deleting then inserting the same rows gives the same table when repeated.
        self._write(replace, repeatable=True)

    def experiment_runs(self, experiment_id: int) -> pd.DataFrame:
        """An experiment's runs as a profile reads them (``RUN_COLUMNS``), in the order they
        were stored."""
        r = Run.__table__
        stmt = (
            select(*(r.c[c] for c in RUN_COLUMNS))
            .where(r.c.experiment_id == experiment_id)
            .order_by(r.c.id)
        )
        rows = self._read(lambda connection: connection.execute(stmt).all())
        return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _loads(text: Any) -> Any:
    if text is None or isinstance(text, dict | list):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _json_ready(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "id"}
    # JSON columns cannot hold NaN on PostgreSQL; a NaN estimate is stored as NULL.
    for key, value in out.items():
        if isinstance(value, float) and value != value:
            out[key] = None
    return out

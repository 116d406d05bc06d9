"""The results store: experiments, configurations, runs and their raw samples."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import (
    Engine,
    create_engine,
    delete,
    event,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from vmtax.errors import UsageError, VmtaxError
from vmtax.store import codec, migrate
from vmtax.store.failures import translated
from vmtax.store.models import Configuration, Experiment, Run, SampleBlock
from vmtax.store.url import redact, resolve, scrub

RUN_STATUSES = ("ok", "failed", "lost")
EXPERIMENT_STATUSES = ("running", "ok", "failed", "interrupted")
SUMMARY_FIELDS = (
    "n", "mean", "median", "stddev", "min", "max", "p95", "p99",
    "wall_s", "ops_per_sec", "throughput", "steal_ticks",
)  # fmt: skip
RUN_COLUMNS = [
    "run_id", "experiment_id", "configuration_id", "config", "level", "labels", "target",
    "hypervisor", "probe", "unit", "better", "throughput_unit", "plan_index", "run_index",
    "status", *SUMMARY_FIELDS, "error",
]  # fmt: skip
_CHUNK = 500  # ids per IN (...) query: well under every backend's parameter limit


def config_key(level: str, labels: dict[str, str]) -> str:
    """The canonical display key of a configuration: level, then sorted ``k=v`` labels."""
    parts = [level, *(f"{k}={labels[k]}" for k in sorted(labels))]
    return " ".join(parts)


def hypervisor_of(fingerprint: dict[str, Any] | None) -> str:
    """The hypervisor a fingerprint detected, lowercase, or ``none``."""
    hv = (fingerprint or {}).get("hypervisor") or {}
    vendor = hv.get("vendor") if hv.get("detected") else None
    return str(vendor).lower() if vendor else "none"


class Store:
    """A results store on SQLite or PostgreSQL. Open it with :meth:`Store.open`."""

    def __init__(self, engine: Engine, url: URL, busy_timeout: float) -> None:
        self._engine = engine
        self._url = url
        self._busy_timeout = busy_timeout
        self.url_display: str = redact(url)

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        busy_timeout: float = 5.0,
        upgrade: bool = True,
        read_only: bool = False,
        check_schema: bool = True,
    ) -> Store:
        """Open (and create or upgrade) the store at ``url``.

        ``url`` None means ``$VMTAX_DB``, else ``vmtax.db`` in the user's data directory. A
        bare path is a SQLite file; ``postgresql://`` URLs use psycopg. Unless ``read_only``,
        the store is checked to be writable now, so a read-only, locked or full database is
        reported before any measurement starts. ``read_only`` stores are never created or
        upgraded; ``check_schema=False`` (with ``read_only``) skips the version check, for
        ``vmtax db info``.
        """
        resolved = resolve(url)
        engine = _engine(resolved, busy_timeout, create=not read_only)
        store = cls(engine, resolved, busy_timeout)
        try:
            store._prepare(upgrade=upgrade, read_only=read_only, check_schema=check_schema)
        except BaseException:
            engine.dispose()
            raise
        return store

    def _prepare(self, *, upgrade: bool, read_only: bool, check_schema: bool) -> None:
        with self._guard():
            if upgrade and not read_only:
                migrate.upgrade(self._engine, self.url_display)
            elif check_schema:
                with self._engine.connect() as connection:
                    rev = migrate.check(connection, self.url_display)
                if rev != migrate.head():
                    raise VmtaxError(
                        f"database {self.url_display} has schema version {rev or 'none'}; "
                        f"this vmtax needs {migrate.head()}: run 'vmtax db upgrade'"
                    )
            if not read_only:
                self._check_writable()

    def close(self) -> None:
        """Release every pooled connection."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for exports and tests)."""
        return self._engine

    def _guard(self) -> Any:
        return translated(self._url, self._busy_timeout)

    def _check_writable(self) -> None:
        # A no-op write inside a rolled-back transaction: it needs the write lock, so a
        # read-only file or a database locked by another writer fails here, not mid-run.
        with self._engine.connect() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = version_num"))
            connection.rollback()

    # -- writing -------------------------------------------------------------------------

    def create_experiment(
        self,
        *,
        command: list[str],
        suite: str,
        seed: int,
        plan: dict[str, Any],
        vmtax_version: str,
        agent_version: str | None,
    ) -> int:
        """Record a new experiment with status ``running``; returns its id."""
        values = {
            "command": [str(x) for x in command],
            "suite": suite,
            "seed": int(seed),
            "plan": _json_safe(plan),
            "vmtax_version": vmtax_version,
            "agent_version": agent_version,
            "host": socket.gethostname(),
            "started_at": _now(),
            "status": "running",
        }
        with self._guard(), self._engine.begin() as connection:
            result = connection.execute(Experiment.__table__.insert().values(**values))
            return int(result.inserted_primary_key[0])

    def finish_experiment(self, experiment_id: int, status: str) -> None:
        """Mark an experiment finished (``ok``, ``failed`` or ``interrupted``) now."""
        if status not in ("ok", "failed", "interrupted"):
            raise ValueError(f"experiment status must be ok, failed or interrupted, not {status!r}")
        self._set_status(experiment_id, status, _now())

    def reopen_experiment(
        self, experiment_id: int, controller: dict[str, Any] | None = None
    ) -> None:
        """Mark an experiment ``running`` again (``vmtax run --resume``).

        ``controller`` identifies the resuming process, so a dead-controller check looks at
        it and not at the first one; every resume is also kept in ``plan["resumed_by"]``.
        """
        if controller is None:
            self._set_status(experiment_id, "running", None)
            return
        t = Experiment.__table__
        with self._guard(), self._engine.begin() as connection:
            plan = connection.execute(select(t.c.plan).where(t.c.id == experiment_id)).scalar()
            if plan is None:
                raise VmtaxError(f"no experiment {experiment_id} in {self.url_display}")
            plan = {
                **plan,
                "controller": controller,
                "resumed_by": [*plan.get("resumed_by", []), controller],
            }
            connection.execute(
                update(Experiment)
                .where(Experiment.id == experiment_id)
                .values(status="running", ended_at=None, plan=plan)
            )

    def _set_status(self, experiment_id: int, status: str, ended: datetime | None) -> None:
        stmt = (
            update(Experiment)
            .where(Experiment.id == experiment_id)
            .values(status=status, ended_at=ended)
        )
        with self._guard(), self._engine.begin() as connection:
            if connection.execute(stmt).rowcount == 0:
                raise VmtaxError(f"no experiment {experiment_id} in {self.url_display}")

    def configuration(
        self,
        *,
        experiment_id: int,
        level: str,
        labels: dict[str, str],
        fingerprint: dict[str, Any],
        target: str,
        provenance: dict[str, Any],
    ) -> int:
        """The id of the configuration (experiment, level, labels), created if new.

        The first fingerprint and provenance recorded for it are kept.
        """
        labels = {str(k): str(v) for k, v in labels.items()}
        key = config_key(level, labels)
        table = Configuration.__table__
        find = select(table.c.id).where(
            table.c.experiment_id == experiment_id, table.c.config_key == key
        )
        with self._guard():
            with self._engine.connect() as connection:
                found = connection.execute(find).scalar_one_or_none()
            if found is not None:
                return int(found)
            # The insert opens its own transaction: on SQLite a transaction that read first
            # and then writes can fail at once with "locked" when another writer is active.
            try:
                with self._engine.begin() as connection:
                    result = connection.execute(
                        table.insert().values(
                            experiment_id=experiment_id,
                            level=level,
                            labels=labels,
                            config_key=key,
                            fingerprint=_json_safe(fingerprint),
                            target=target,
                            provenance=_json_safe(provenance),
                        )
                    )
                    return int(result.inserted_primary_key[0])
            except IntegrityError:
                pass  # another writer created it between our select and insert
            with self._engine.connect() as connection:
                return int(connection.execute(find).scalar_one())

    def add_run(
        self,
        *,
        experiment_id: int,
        configuration_id: int,
        probe: str,
        plan_index: int,
        run_index: int,
        header: dict[str, Any] | None,
        summary: dict[str, Any] | None,
        values: np.ndarray,
        warmup_values: np.ndarray,
        status: str,
        error: str | None = None,
    ) -> int:
        """Store one run and its samples in one transaction, committed before returning.

        A run with status ``ok`` already stored for the same (experiment, configuration,
        probe, plan_index, run_index) is never rewritten: that raises VmtaxError.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, not {status!r}")
        summary = dict(summary or {})
        header = dict(header) if header is not None else None
        row: dict[str, Any] = {
            "experiment_id": experiment_id,
            "configuration_id": configuration_id,
            "probe": probe,
            "unit": (header or {}).get("unit"),
            "better": (header or {}).get("better"),
            "throughput_unit": summary.get("throughput_unit")
            or (header or {}).get("throughput_unit"),
            "plan_index": int(plan_index),
            "run_index": int(run_index),
            "status": status,
            "header": _json_safe(header),
            "error": error,
            "created_at": _now(),
        }
        for name in SUMMARY_FIELDS:
            row[name] = _number(summary.get(name)) if status == "ok" else None
        extra = {k: v for k, v in summary.items() if k not in SUMMARY_FIELDS and k != "type"}
        row["summary_extra"] = _json_safe(extra) if extra else None
        blocks = [
            ("measured", codec.encode(values)),
            ("warmup", codec.encode(warmup_values)),
        ]
        with self._guard():
            try:
                with self._engine.begin() as connection:
                    result = connection.execute(Run.__table__.insert().values(**row))
                    run_id = int(result.inserted_primary_key[0])
                    connection.execute(
                        SampleBlock.__table__.insert(),
                        [
                            {
                                "run_id": run_id,
                                "kind": kind,
                                "dtype": d,
                                "codec": c,
                                "count": n,
                                "data": data,
                            }
                            for kind, (d, c, n, data) in blocks
                        ],
                    )
            except IntegrityError as exc:
                if _is_unique(exc):
                    raise VmtaxError(
                        f"run {run_index} of plan item {plan_index} ({probe}) of experiment "
                        f"{experiment_id} is already stored; a completed run is never rewritten"
                    ) from None
                raise VmtaxError(
                    scrub(f"cannot store run of {probe}: {exc.orig}".splitlines()[0], self._url)
                ) from None
        return run_id

    # -- reading -------------------------------------------------------------------------

    def completed_plan_indices(self, experiment_id: int) -> set[int]:
        """Plan items that need no rerun on resume.

        An item is complete when it has an ok run and every run index it recorded (failed or
        lost ones included) has an ok row.
        """
        t = Run.__table__
        stmt = select(t.c.plan_index, t.c.run_index, t.c.status).where(
            t.c.experiment_id == experiment_id
        )
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).all()
        seen: dict[int, dict[int, bool]] = {}
        for plan_index, run_index, status in rows:
            runs = seen.setdefault(int(plan_index), {})
            runs[int(run_index)] = runs.get(int(run_index), False) or status == "ok"
        return {p for p, runs in seen.items() if runs and all(runs.values())}

    def completed_runs(self, experiment_id: int) -> set[tuple[int, int]]:
        """(plan_index, run_index) of every ok run of an experiment."""
        t = Run.__table__
        stmt = select(t.c.plan_index, t.c.run_index).where(
            t.c.experiment_id == experiment_id, t.c.status == "ok"
        )
        with self._guard(), self._engine.connect() as connection:
            return {(int(p), int(r)) for p, r in connection.execute(stmt)}

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        """One experiment as a dict, with its configurations and run counts per status."""
        t = Experiment.__table__
        with self._guard(), self._engine.connect() as connection:
            row = connection.execute(select(t).where(t.c.id == experiment_id)).mappings().first()
            if row is None:
                raise VmtaxError(f"no experiment {experiment_id} in {self.url_display}")
            c = Configuration.__table__
            configs = (
                connection.execute(
                    select(c).where(c.c.experiment_id == experiment_id).order_by(c.c.id)
                )
                .mappings()
                .all()
            )
            r = Run.__table__
            counts = connection.execute(
                select(r.c.status, func.count())
                .where(r.c.experiment_id == experiment_id)
                .group_by(r.c.status)
            ).all()
        out = dict(row)
        out["started_at"], out["ended_at"] = _utc(out["started_at"]), _utc(out["ended_at"])
        out["configurations"] = [
            {
                **dict(cfg),
                "config": cfg["config_key"],
                "hypervisor": hypervisor_of(cfg["fingerprint"]),
            }
            for cfg in configs
        ]
        out["run_counts"] = {str(s): int(n) for s, n in counts}
        return out

    def configurations(self, configuration_ids: Iterable[int] | None = None) -> pd.DataFrame:
        """Configurations (all, or the given ids) with their fingerprints and provenance.

        Columns: configuration_id, experiment_id, config, level, labels, target, hypervisor,
        fingerprint, provenance.
        """
        c = Configuration.__table__
        stmt = select(c).order_by(c.c.id)
        if configuration_ids is not None:
            stmt = stmt.where(c.c.id.in_(sorted({int(i) for i in configuration_ids})))
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).mappings().all()
        columns = ["configuration_id", "experiment_id", "config", "level", "labels", "target",
                   "hypervisor", "fingerprint", "provenance"]  # fmt: skip
        return pd.DataFrame(
            [
                [row["id"], row["experiment_id"], row["config_key"], row["level"],
                 dict(row["labels"] or {}), row["target"], hypervisor_of(row["fingerprint"]),
                 row["fingerprint"], row["provenance"]]
                for row in rows
            ],
            columns=columns,
        )  # fmt: skip

    def latest_experiment_id(self) -> int | None:
        """The newest experiment's id, or None in an empty store."""
        with self._guard(), self._engine.connect() as connection:
            value = connection.execute(select(func.max(Experiment.__table__.c.id))).scalar()
        return None if value is None else int(value)

    def experiments(self) -> pd.DataFrame:
        """One row per experiment: id, suite, seed, status, times, versions, host, counts."""
        e, r, c = Experiment.__table__, Run.__table__, Configuration.__table__
        runs = (
            select(r.c.experiment_id, func.count().label("n_runs"),
                   func.sum(_case_ok(r)).label("n_ok"))
            .group_by(r.c.experiment_id).subquery()
        )  # fmt: skip
        cfgs = (
            select(c.c.experiment_id, func.count().label("n_configurations"))
            .group_by(c.c.experiment_id).subquery()
        )  # fmt: skip
        stmt = (
            select(
                e.c.id.label("experiment_id"), e.c.suite, e.c.seed, e.c.status,
                e.c.started_at, e.c.ended_at, e.c.vmtax_version, e.c.agent_version, e.c.host,
                e.c.command, runs.c.n_runs, runs.c.n_ok, cfgs.c.n_configurations,
            )
            .outerjoin(runs, runs.c.experiment_id == e.c.id)
            .outerjoin(cfgs, cfgs.c.experiment_id == e.c.id)
            .order_by(e.c.id)
        )  # fmt: skip
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).mappings().all()
        df = pd.DataFrame([dict(x) for x in rows], columns=list(stmt.selected_columns.keys()))
        for col in ("started_at", "ended_at"):
            df[col] = pd.to_datetime([_utc(x) for x in df[col]], utc=True)
        for col in ("n_runs", "n_ok", "n_configurations"):
            df[col] = df[col].fillna(0).astype("int64")
        return df

    def runs(self, selectors: Sequence[str] = ()) -> pd.DataFrame:
        """Runs matching any of ``selectors`` (all runs when empty), see ``store.select``."""
        from vmtax.store import select as sel

        parsed = [sel.parse(s) for s in selectors]  # malformed input fails before any query
        df = self._all_runs(sel.experiment_ids(parsed, self.latest_experiment_id))
        if parsed:
            keep = pd.Series(False, index=df.index)
            for one in parsed:
                keep |= sel.apply(df, one)
            df = df[keep]
        return df.reset_index(drop=True)

    def _all_runs(self, experiment_ids: set[int] | None) -> pd.DataFrame:
        r, c = Run.__table__, Configuration.__table__
        stmt = select(
            r.c.id.label("run_id"), r.c.experiment_id, r.c.configuration_id, r.c.probe,
            r.c.unit, r.c.better, r.c.throughput_unit, r.c.plan_index, r.c.run_index,
            r.c.status, *(r.c[name] for name in SUMMARY_FIELDS), r.c.error,
        ).order_by(r.c.id)  # fmt: skip
        # Configurations are few: read them (and parse their JSON) once, not once per run.
        cfg_stmt = select(c.c.id, c.c.config_key, c.c.level, c.c.labels, c.c.target,
                          c.c.fingerprint)  # fmt: skip
        if experiment_ids is not None:
            stmt = stmt.where(r.c.experiment_id.in_(sorted(experiment_ids)))
            cfg_stmt = cfg_stmt.where(c.c.experiment_id.in_(sorted(experiment_ids)))
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).all()
            configs = {
                int(cid): (key, level, dict(labels or {}), target, hypervisor_of(fp))
                for cid, key, level, labels, target, fp in connection.execute(cfg_stmt)
            }
        df = pd.DataFrame(rows, columns=list(stmt.selected_columns.keys()))
        cfg = [configs[int(cid)] for cid in df["configuration_id"]]
        for pos, name in enumerate(("config", "level", "labels", "target", "hypervisor")):
            df[name] = pd.Series([x[pos] for x in cfg], index=df.index, dtype=object)
        df = df[RUN_COLUMNS].copy()
        for name in SUMMARY_FIELDS:
            df[name] = df[name].astype("Int64" if name in ("n", "steal_ticks") else "float64")
        return df

    def samples(self, run_ids: Iterable[int], *, warmup: bool = False) -> dict[int, np.ndarray]:
        """Raw values per run id (float64, iteration order); warm-up values if ``warmup``.

        Run ids that are not in the store are left out of the result.
        """
        ids = sorted({int(i) for i in run_ids})
        kind = "warmup" if warmup else "measured"
        t = SampleBlock.__table__
        out: dict[int, np.ndarray] = {}
        with self._guard(), self._engine.connect() as connection:
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                stmt = select(t.c.run_id, t.c.dtype, t.c.codec, t.c.count, t.c.data).where(
                    t.c.kind == kind, t.c.run_id.in_(chunk)
                )
                for run_id, dtype, cdc, count, data in connection.execute(stmt):
                    out[int(run_id)] = codec.decode(dtype, cdc, int(count), data)
        return out

    def info(self) -> dict[str, Any]:
        """The store URL (password redacted), schema version and row counts per table."""
        with self._guard(), self._engine.connect() as connection:
            version = migrate.current(connection)
            present = set(inspect(connection).get_table_names())
            counts = {}
            for model in (Experiment, Configuration, Run, SampleBlock):
                name = model.__tablename__
                query = select(func.count()).select_from(model.__table__)
                counts[name] = int(connection.execute(query).scalar_one()) if name in present else 0
            n_values = 0
            if SampleBlock.__tablename__ in present:
                total = func.coalesce(func.sum(SampleBlock.__table__.c.count), 0)
                n_values = connection.execute(select(total)).scalar_one()
        counts["sample_values"] = int(n_values)
        return {
            "url": self.url_display,
            "backend": self._url.get_backend_name(),
            "schema_version": version,
            "schema_head": migrate.head(),
            "counts": counts,
        }

    def delete_experiment(self, experiment_id: int) -> None:
        """Remove an experiment with its configurations, runs and samples."""
        r, s = Run.__table__, SampleBlock.__table__
        run_ids = select(r.c.id).where(r.c.experiment_id == experiment_id)
        with self._guard(), self._engine.begin() as connection:
            connection.execute(delete(s).where(s.c.run_id.in_(run_ids)))
            connection.execute(delete(r).where(r.c.experiment_id == experiment_id))
            connection.execute(
                delete(Configuration.__table__).where(
                    Configuration.__table__.c.experiment_id == experiment_id
                )
            )
            gone = connection.execute(
                delete(Experiment.__table__).where(Experiment.__table__.c.id == experiment_id)
            ).rowcount
        if gone == 0:
            raise VmtaxError(f"no experiment {experiment_id} in {self.url_display}")


def _engine(url: URL, busy_timeout: float, *, create: bool) -> Engine:
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "")
        if create and not path.parent.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise VmtaxError(
                    f"database {redact(url)}: cannot create directory {path.parent}: {exc.strerror}"
                ) from None
        if not create and not path.exists():
            raise VmtaxError(f"database {redact(url)}: no such file")
        # NullPool: a connection per use, so no idle handle keeps a lock or a stale view.
        engine = create_engine(url, connect_args={"timeout": busy_timeout}, poolclass=NullPool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return create_engine(
            url,
            pool_pre_ping=True,
            connect_args={"connect_timeout": max(1, math.ceil(busy_timeout))},
        )
    except (NoSuchModuleError, ImportError):
        raise UsageError("PostgreSQL stores need psycopg: pip install 'psycopg[binary]'") from None


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _case_ok(runs: Any) -> Any:
    from sqlalchemy import case

    return case((runs.c.status == "ok", 1), else_=0)


def _is_unique(exc: IntegrityError) -> bool:
    text_ = str(exc.orig).lower()
    return "unique" in text_ or "duplicate key" in text_


def _number(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _json_safe(value: Any) -> Any:
    # JSON columns cannot hold NaN/inf on PostgreSQL; the contract writes null for them.
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def _utc(value: datetime | None) -> datetime | None:
    # SQLite hands timestamps back without their zone; they were written in UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _now() -> datetime:
    return datetime.now(UTC)

"""The results store: experiments, configurations, runs and their raw samples."""

from __future__ import annotations

import contextlib
import functools
import math
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from sqlalchemy import (
    Engine,
    Table,
    case,
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
from sqlalchemy.exc import DBAPIError, IntegrityError, NoSuchModuleError
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.elements import Case

from vmtax.errors import UsageError, VmtaxError
from vmtax.store import codec, migrate
from vmtax.store import select as sel
from vmtax.store.exits import ExitRepository
from vmtax.store.failures import translated
from vmtax.store.models import Configuration, Experiment, Run, SampleBlock
from vmtax.store.noise import NoiseRepository
from vmtax.store.reader import (
    CHUNK,
    config_parts,
    configurations_frame,
    experiment_dict,
    runs_frame,
    sample_arrays,
    utc,
)
from vmtax.store.reader import RUN_COLUMNS as RUN_COLUMNS
from vmtax.store.reader import SUMMARY_FIELDS as SUMMARY_FIELDS
from vmtax.store.reader import UNRECORDED_BOOT as UNRECORDED_BOOT
from vmtax.store.reader import hypervisor_of as hypervisor_of
from vmtax.store.repository import inserted_id
from vmtax.store.runtimes import RunTimes
from vmtax.store.sampling import SamplingRepository
from vmtax.store.sweeps import SweepRepository
from vmtax.store.url import default_path, redact, resolve, scrub

RUN_STATUSES = ("ok", "failed", "lost")
EXPERIMENT_STATUSES = ("running", "ok", "failed", "interrupted")
_MIGRATION_LOCK = 0x766D746178  # "vmtax": the advisory lock key of schema upgrades
#: How long a PostgreSQL store keeps trying to reconnect (server restarting) before failing.
RECONNECT_TIMEOUT = 60.0
T = TypeVar("T")
# Connection failures that are not worth waiting out: the server is there but says no.
_NOT_TRANSIENT = ("authentication", "does not exist", "permission denied", "no pg_hba.conf")


def _reconnecting(method: Callable[..., T]) -> Callable[..., T]:
    """Run a store method again after a lost PostgreSQL connection (see ``Store._retry``).

    Only for methods that are safe to repeat: reads, and writes that look for their own
    earlier commit first.
    """

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        return self._retry(lambda: method(self, *args, **kwargs))

    return wrapper


def config_key(level: str, labels: dict[str, str]) -> str:
    """The canonical display key of a configuration: level, then sorted ``k=v`` labels."""
    parts = [level, *(f"{k}={labels[k]}" for k in sorted(labels))]
    return " ".join(parts)


class Store:
    """A results store on SQLite or PostgreSQL. Open it with :meth:`Store.open`."""

    def __init__(
        self,
        engine: Engine,
        url: URL,
        busy_timeout: float,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
    ) -> None:
        self._engine = engine
        self._url = url
        self._busy_timeout = busy_timeout
        self.reconnect_timeout = reconnect_timeout
        self.reconnects = 0
        # Only a store that has worked is waited for: a wrong URL fails at once.
        self._has_worked = False
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
        reconnect_timeout: float = RECONNECT_TIMEOUT,
    ) -> Store:
        """Open (and create or upgrade) the store at ``url``.

        ``url`` None means ``$VMTAX_DB``, else ``vmtax.db`` in the user's data directory. A
        bare path is a SQLite file; ``postgresql://`` URLs use psycopg. Unless ``read_only``,
        the store is checked to be writable now, so a read-only, locked or full database is
        reported before any measurement starts. ``read_only`` stores are never created or
        upgraded; ``check_schema=False`` (with ``read_only``) skips the version check, for
        ``vmtax db info``.

        Once open, a PostgreSQL store outlives a server restart: an operation that loses its
        connection is repeated on a new one for up to ``reconnect_timeout`` seconds. A write
        that may have been committed just before the connection broke looks for its own row
        first, so nothing is stored twice.
        """
        resolved = resolve(url)
        engine = _engine(resolved, busy_timeout, create=not read_only)
        store = cls(engine, resolved, busy_timeout, reconnect_timeout)
        try:
            store._prepare(upgrade=upgrade, read_only=read_only, check_schema=check_schema)
        except BaseException:
            engine.dispose()
            raise
        store._has_worked = upgrade or check_schema or not read_only
        return store

    def _prepare(self, *, upgrade: bool, read_only: bool, check_schema: bool) -> None:
        with self._guard():
            if upgrade and not read_only:
                with self._migration_lock():
                    migrate.upgrade(self._engine, self.url_display)
            elif check_schema:
                with self._engine.connect() as connection:
                    rev = migrate.check(connection, self.url_display)
                if rev != migrate.HEAD:
                    raise VmtaxError(
                        f"database {self.url_display} has schema version {rev or 'none'}; "
                        f"this vmtax needs {migrate.head()}: run 'vmtax db upgrade'"
                    )
            if not read_only:
                self._check_writable()

    @contextlib.contextmanager
    def _migration_lock(self) -> Iterator[None]:
        # Controllers started together on a new PostgreSQL database would each create the
        # schema; a session advisory lock lets one do it while the others wait, then find it
        # done. (SQLite's write lock already serializes them.)
        if self._url.get_backend_name() != "postgresql":
            yield
            return
        with self._engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
            connection.commit()
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
                connection.commit()

    def _lost_connection(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` (the driver error behind a VmtaxError) is a lost or refused
        PostgreSQL connection that a reconnect may cure."""
        if self._url.get_backend_name() != "postgresql" or not isinstance(exc, DBAPIError):
            return False
        # optional: psycopg is installed only for PostgreSQL stores
        import psycopg

        if not (exc.connection_invalidated or isinstance(exc.orig, psycopg.OperationalError)):
            return False
        return not any(word in str(exc.orig).lower() for word in _NOT_TRANSIENT)

    def _retry(self, call: Callable[[], T], recover: Callable[[], T | None] | None = None) -> T:
        """``call()``, repeated on a new connection while the PostgreSQL server is away.

        ``recover`` (for writes) is asked before each repeat whether the previous attempt
        was committed after all, and returns its result if so.
        """
        started: float | None = None
        pause = 0.1
        while True:
            try:
                if started is not None and recover is not None:
                    found = recover()
                    if found is not None:
                        return found
                result = call()
                self._has_worked = True
                return result
            except VmtaxError as exc:
                if not self._has_worked or not self._lost_connection(exc.__context__):
                    raise
                now = time.monotonic()
                started = started if started is not None else now
                if now - started > self.reconnect_timeout:
                    raise VmtaxError(
                        f"{exc.message} (gave up reconnecting after {self.reconnect_timeout:g} s)"
                    ) from None
                self.reconnects += 1
                self._engine.dispose()  # every pooled connection died with the server
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

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

    @functools.cached_property
    def exits(self) -> ExitRepository:
        """Exit profiles and their counts (``vmtax.store.exits``)."""
        return ExitRepository(self)

    @functools.cached_property
    def sweeps(self) -> SweepRepository:
        """Sweep steps and their samples (``vmtax.store.sweeps``)."""
        return SweepRepository(self)

    @functools.cached_property
    def sampling(self) -> SamplingRepository:
        """Adaptive sampling's looks and outcomes (``vmtax.store.sampling``)."""
        return SamplingRepository(self)

    @functools.cached_property
    def noise(self) -> NoiseRepository:
        """Noise profiles and the runs they are learnt from (``vmtax.store.noise``)."""
        return NoiseRepository(self)

    def url_with_password(self) -> str:
        """The store's URL, password included: only for a child process's environment,
        never for a command line or a message (``url_display`` is redacted)."""
        return self._engine.url.render_as_string(hide_password=False)

    def _guard(self) -> AbstractContextManager[None]:
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
        t = Experiment.__table__

        def insert() -> int:
            with self._guard(), self._engine.begin() as connection:
                result = connection.execute(t.insert().values(**values))
                return inserted_id(result)

        def committed_before() -> int | None:
            # The same row, if the attempt whose connection broke was committed after all.
            with self._guard(), self._engine.connect() as connection:
                found = connection.execute(
                    select(t.c.id).where(
                        t.c.started_at == values["started_at"],
                        t.c.host == values["host"],
                        t.c.seed == values["seed"],
                    )
                ).scalar()
            return None if found is None else int(found)

        return self._retry(insert, committed_before)

    @_reconnecting
    def finish_experiment(self, experiment_id: int, status: str) -> None:
        """Mark an experiment finished (``ok``, ``failed`` or ``interrupted``) now."""
        if status not in ("ok", "failed", "interrupted"):
            raise ValueError(f"experiment status must be ok, failed or interrupted, not {status!r}")
        self._set_status(experiment_id, status, _now())

    @_reconnecting
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

    @_reconnecting
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
                    return inserted_id(result)
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
        times: RunTimes | None = None,
    ) -> int:
        """Store one run and its samples in one transaction, committed before returning.

        ``times`` is when the controller started and ended the run (None: not recorded).

        A run with status ``ok`` already stored for the same (experiment, configuration,
        probe, plan_index, run_index) is never rewritten: that raises VmtaxError.
        """
        row, blocks = self._run_row(
            experiment_id=experiment_id, configuration_id=configuration_id, probe=probe,
            plan_index=plan_index, run_index=run_index, header=header, summary=summary,
            values=values, warmup_values=warmup_values, status=status, error=error,
            times=times,
        )  # fmt: skip
        return self._retry(
            lambda: self._insert_runs([(row, blocks)])[0], lambda: self._stored_run(row)
        )

    def add_runs(self, runs: Sequence[dict[str, Any]]) -> list[int]:
        """Store many runs, each given as :meth:`add_run`'s keyword arguments, in one
        transaction (all or none); their ids in order. `vmtax import` of a stream of
        thousands of short runs commits once instead of once per run."""
        headers: dict[int, Any] = {}  # one stream's runs share a header: made JSON-safe once
        prepared = [self._run_row(**run, safe_headers=headers) for run in runs]
        if not prepared:
            return []

        def committed() -> list[int] | None:
            # The last row there means the transaction was committed before the connection
            # went away: the others are there too.
            if self._stored_run(prepared[-1][0]) is None:
                return None
            return [int(self._stored_run(row) or 0) for row, _ in prepared]

        return self._retry(lambda: self._insert_runs(prepared), committed)

    def _run_row(
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
        times: RunTimes | None = None,
        safe_headers: dict[int, Any] | None = None,
    ) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        """One run's row and its sample blocks, encoded (``safe_headers``: the JSON-safe
        form of headers already seen, by identity)."""
        safe_header = None
        if header is not None and safe_headers is not None:
            if id(header) not in safe_headers:
                safe_headers[id(header)] = (header, _json_safe(dict(header)))
            safe_header = safe_headers[id(header)][1]
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
            "header": safe_header if safe_header is not None else _json_safe(header),
            "boot_id": _boot_id(header),
            "error": error,
            "created_at": _now(),
            **(times.columns() if times is not None else {}),
        }
        for name in SUMMARY_FIELDS:
            row[name] = _number(summary.get(name)) if status == "ok" else None
        extra = {k: v for k, v in summary.items() if k not in SUMMARY_FIELDS and k != "type"}
        row["summary_extra"] = _json_safe(extra) if extra else None
        blocks = [
            ("measured", codec.encode(values)),
            ("warmup", codec.encode(warmup_values)),
        ]
        return row, blocks

    def _stored_run(self, row: dict[str, Any]) -> int | None:
        """The id of ``row`` if it is in the store already (same keys, same created_at)."""
        t = Run.__table__
        keys = ("experiment_id", "configuration_id", "probe", "plan_index", "run_index", "status")
        stmt = select(t.c.id).where(
            *(t.c[k] == row[k] for k in keys), t.c.created_at == row["created_at"]
        )
        with self._guard(), self._engine.connect() as connection:
            found = connection.execute(stmt).scalar()
        return None if found is None else int(found)

    def _insert_runs(
        self, prepared: list[tuple[dict[str, Any], list[tuple[str, Any]]]]
    ) -> list[int]:
        ids: list[int] = []
        row: dict[str, Any] = prepared[0][0]
        with self._guard():
            try:
                with self._engine.begin() as connection:
                    for row, blocks in prepared:
                        ids.append(self._insert_one(connection, row, blocks))
            except IntegrityError as exc:
                probe, plan_index = row["probe"], row["plan_index"]
                run_index, experiment_id = row["run_index"], row["experiment_id"]
                if _is_unique(exc):
                    raise VmtaxError(
                        f"run {run_index} of plan item {plan_index} ({probe}) of experiment "
                        f"{experiment_id} is already stored; a completed run is never rewritten"
                    ) from None
                raise VmtaxError(
                    scrub(f"cannot store run of {probe}: {exc.orig}".splitlines()[0], self._url)
                ) from None
        return ids

    @staticmethod
    def _insert_one(connection: Any, row: dict[str, Any], blocks: list[tuple[str, Any]]) -> int:
        """One run's row and its blocks, inside the caller's transaction."""
        # The row as parameters of one statement: compiled once, not once per run.
        run_id = inserted_id(connection.execute(Run.__table__.insert(), row))
        connection.execute(
            SampleBlock.__table__.insert(),
            [
                {"run_id": run_id, "kind": kind, "dtype": d, "codec": c, "count": n, "data": data}
                for kind, (d, c, n, data) in blocks
            ],
        )
        return run_id

    # -- reading -------------------------------------------------------------------------

    @_reconnecting
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

    @_reconnecting
    def completed_runs(self, experiment_id: int) -> set[tuple[int, int]]:
        """(plan_index, run_index) of every ok run of an experiment."""
        t = Run.__table__
        stmt = select(t.c.plan_index, t.c.run_index).where(
            t.c.experiment_id == experiment_id, t.c.status == "ok"
        )
        with self._guard(), self._engine.connect() as connection:
            return {(int(p), int(r)) for p, r in connection.execute(stmt)}

    @_reconnecting
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
        # The dict as store.reader builds it from the same rows read without SQLAlchemy.
        return experiment_dict(row, configs, counts)

    @_reconnecting
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
        return configurations_frame(rows)

    @_reconnecting
    def latest_experiment_id(self) -> int | None:
        """The newest experiment's id, or None in an empty store."""
        with self._guard(), self._engine.connect() as connection:
            value = connection.execute(select(func.max(Experiment.__table__.c.id))).scalar()
        return None if value is None else int(value)

    @_reconnecting
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
            df[col] = pd.to_datetime(
                pd.Series([utc(x) for x in df[col]], index=df.index, dtype=object), utc=True
            )
        for col in ("n_runs", "n_ok", "n_configurations"):
            df[col] = df[col].fillna(0).astype("int64")
        return df

    @_reconnecting
    def runs(self, selectors: Sequence[str] = ()) -> pd.DataFrame:
        """Runs matching any of ``selectors`` (all runs when empty), see ``store.select``."""
        parsed = [sel.parse(s) for s in selectors]  # malformed input fails before any query
        self._check_experiments_exist(sel.named_experiment_ids(parsed))
        df = self._all_runs(sel.experiment_ids(parsed, self.latest_experiment_id))
        return sel.matching(df, parsed)

    def _check_experiments_exist(self, ids: set[int]) -> None:
        """A selector naming an experiment id the store lacks is "not found" (exit 1), the
        same as `results show N`, not an empty selection."""
        if not ids:
            return
        t = Experiment.__table__
        with self._guard(), self._engine.connect() as connection:
            found = set(connection.execute(select(t.c.id).where(t.c.id.in_(sorted(ids)))).scalars())
        missing = sorted(ids - found)
        if missing:
            raise VmtaxError(f"no experiment {missing[0]} in {self.url_display}")

    def _all_runs(self, experiment_ids: set[int] | None) -> pd.DataFrame:
        r, c = Run.__table__, Configuration.__table__
        stmt = select(
            r.c.id.label("run_id"), r.c.experiment_id, r.c.configuration_id, r.c.probe,
            r.c.unit, r.c.better, r.c.throughput_unit, r.c.plan_index, r.c.run_index,
            r.c.status, *(r.c[name] for name in SUMMARY_FIELDS), r.c.error, r.c.boot_id,
        ).order_by(r.c.id)  # fmt: skip
        # Configurations are few: read them (and parse their JSON) once, not once per run.
        cfg_stmt = select(c.c.id, c.c.config_key, c.c.level, c.c.labels, c.c.target,
                          c.c.fingerprint)  # fmt: skip
        if experiment_ids is not None:
            stmt = stmt.where(r.c.experiment_id.in_(sorted(experiment_ids)))
            cfg_stmt = cfg_stmt.where(c.c.experiment_id.in_(sorted(experiment_ids)))
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).all()
            configs = config_parts(connection.execute(cfg_stmt))
        # The frame as store.reader builds it from the same rows read without SQLAlchemy.
        return runs_frame(rows, configs)

    @_reconnecting
    def executed_order(self, experiment_id: int) -> pd.DataFrame:
        """One experiment's runs in the order they ran (by the controller's start time), with
        their configuration's level and target; runs stored without times come last, by id."""
        r, c = Run.__table__, Configuration.__table__
        stmt = (
            select(
                r.c.id.label("run_id"),
                c.c.level,
                c.c.target,
                r.c.probe,
                r.c.plan_index,
                r.c.run_index,
                r.c.status,
                r.c.started_at,
                r.c.ended_at,
                r.c.started_ns,
                r.c.ended_ns,
            )  # fmt: skip
            .join(c, c.c.id == r.c.configuration_id)
            .where(r.c.experiment_id == experiment_id)
            .order_by(r.c.started_ns.is_(None), r.c.started_ns, r.c.id)
        )
        with self._guard(), self._engine.connect() as connection:
            rows = connection.execute(stmt).all()
        df = pd.DataFrame(rows, columns=list(stmt.selected_columns.keys()))
        for col in ("started_at", "ended_at"):
            df[col] = pd.to_datetime(
                pd.Series([utc(x) for x in df[col]], index=df.index, dtype=object), utc=True
            )
        for col in ("started_ns", "ended_ns"):
            df[col] = df[col].astype("Int64")
        return df

    @_reconnecting
    def samples(self, run_ids: Iterable[int], *, warmup: bool = False) -> dict[int, np.ndarray]:
        """Raw values per run id (float64, iteration order); warm-up values if ``warmup``.

        Run ids that are not in the store are left out of the result.
        """
        ids = sorted({int(i) for i in run_ids})
        kind = "warmup" if warmup else "measured"
        t = SampleBlock.__table__
        out: dict[int, np.ndarray] = {}
        with self._guard(), self._engine.connect() as connection:
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                stmt = select(t.c.run_id, t.c.dtype, t.c.codec, t.c.count, t.c.data).where(
                    t.c.kind == kind, t.c.run_id.in_(chunk)
                )
                out.update(sample_arrays(connection.execute(stmt)))
        return out

    @_reconnecting
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
            if path != default_path():
                # A mistyped --db must not leave a tree of directories behind.
                raise UsageError(
                    f"database {redact(url)}: directory {path.parent} does not exist "
                    "(vmtax creates only its default store's directory)"
                )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise VmtaxError(
                    f"database {redact(url)}: cannot create directory {path.parent}: {exc.strerror}"
                ) from None
        if not create and not path.exists():
            raise VmtaxError(
                f"database {redact(url)}: no such file (`vmtax run` or `vmtax import` creates it)"
            )
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


def _case_ok(runs: Table) -> Case[int]:
    return case((runs.c.status == "ok", 1), else_=0)


def _is_unique(exc: IntegrityError) -> bool:
    text_ = str(exc.orig).lower()
    return "unique" in text_ or "duplicate key" in text_


def _boot_id(header: dict[str, Any] | None) -> str | None:
    """The header's boot id, when the agent wrote one (a string of at most 64 characters)."""
    boot = (header or {}).get("boot_id")
    return boot if isinstance(boot, str) and 0 < len(boot) <= 64 else None


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


def _now() -> datetime:
    return datetime.now(UTC)

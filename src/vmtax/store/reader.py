"""The store's read-only door for what `vmtax compare` and `vmtax report` read: runs, their
samples, experiments, configurations, exit counts, adaptive sampling's outcomes and whether
noise profiles are stored, from a SQLite store through Python's own ``sqlite3`` driver,
without SQLAlchemy.

SQLAlchemy, its ORM models and the rest of :class:`vmtax.store.Store` cost most of a second
of CPU to import, as much as the comparison they serve. A :class:`StoreReader` opens a
SQLite store at the newest schema revision itself and reads the same rows :class:`Store`
does, into the same frames and dicts (:func:`runs_frame`, :func:`experiment_dict`,
:func:`configurations_frame` and :func:`sample_arrays` build them for both, so they cannot
drift apart; tests compare the two). Its columns decode as SQLAlchemy decodes them: JSON
parsed, timestamps as datetimes, booleans as bools (:class:`Table`; a test holds them to
the models). Everything else goes through a :class:`Store` it opens when first needed: a
PostgreSQL store, a URL this module does not parse, a store at another revision or one the
driver cannot read (so every error reads as the store's own), and whatever it does not serve
itself (:meth:`StoreReader.store`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from vmtax.errors import VmtaxError
from vmtax.store import revision
from vmtax.store import select as sel
from vmtax.store.url import ENV_VAR, default_path

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from vmtax.store.store import Store

SUMMARY_FIELDS = (
    "n", "mean", "median", "stddev", "min", "max", "p95", "p99",
    "wall_s", "ops_per_sec", "throughput", "steal_ticks",
)  # fmt: skip
RUN_COLUMNS = [
    "run_id", "experiment_id", "configuration_id", "config", "level", "labels", "target",
    "hypervisor", "probe", "unit", "better", "throughput_unit", "plan_index", "run_index",
    "status", *SUMMARY_FIELDS, "error", "boot",
]  # fmt: skip
#: The columns of the runs query, in order (``run_id`` is the runs table's ``id``).
RUN_QUERY_COLUMNS = [
    "run_id", "experiment_id", "configuration_id", "probe", "unit", "better",
    "throughput_unit", "plan_index", "run_index", "status", *SUMMARY_FIELDS, "error", "boot_id",
]  # fmt: skip
#: The ``boot`` of a run stored without a boot id, followed by its configuration's id.
UNRECORDED_BOOT = "unrecorded-"
#: The TSC unit's name, and the names runs stored before it had, as ``vmtax.contract`` has
#: them (a test holds them equal): the contract's pydantic models cost a tenth of a second
#: of CPU to build, more than reading the runs.
TSC_UNIT = "tsc_cycles"
LEGACY_TSC_UNITS = frozenset({"cycles"})
#: What a configuration contributes to its runs' rows, by configuration id.
ConfigParts = dict[int, tuple[str, str, dict[str, Any], str, str]]
T = TypeVar("T")
#: A row by column name: a dict, or SQLAlchemy's RowMapping (whose keys may also be columns).
Row = Mapping[Any, Any]
#: Ids per IN (...) query: well under every backend's parameter limit.
CHUNK = 500
#: Columns of ``Store.configurations()``.
CONFIGURATION_FRAME_COLUMNS = [
    "configuration_id", "experiment_id", "config", "level", "labels", "target", "hypervisor",
    "fingerprint", "provenance",
]  # fmt: skip


@dataclass(frozen=True)
class Table:
    """Columns of one table (or query) in the order Store reads them, and which of them
    SQLAlchemy hands back decoded: JSON parsed, timestamps parsed, booleans as bools."""

    columns: tuple[str, ...]
    json: frozenset[str] = frozenset()
    times: frozenset[str] = frozenset()
    booleans: frozenset[str] = frozenset()

    def decoded(self, row: Sequence[Any]) -> dict[str, Any]:
        """A row of these columns as SQLAlchemy gives it back (its mapping)."""
        out = dict(zip(self.columns, row, strict=True))
        try:
            for name in self.json:
                out[name] = _json(out[name])
            for name in self.times:
                # SQLAlchemy's SQLite DateTime: an ISO string, parsed without its zone
                value = out[name]
                out[name] = None if value is None else datetime.fromisoformat(value)
        except (ValueError, TypeError):
            raise _Unread from None  # not what SQLAlchemy wrote: Store says what it is
        for name in self.booleans:
            out[name] = None if out[name] is None else bool(out[name])
        return out


#: The experiments and configurations tables, as ``store.models`` declares them.
EXPERIMENTS = Table(
    ("id", "command", "suite", "seed", "plan", "vmtax_version", "agent_version", "host",
     "started_at", "ended_at", "status"),
    json=frozenset({"command", "plan"}),
    times=frozenset({"started_at", "ended_at"}),
)  # fmt: skip
CONFIGURATIONS = Table(
    ("id", "experiment_id", "level", "labels", "config_key", "fingerprint", "target",
     "provenance"),
    json=frozenset({"labels", "fingerprint", "provenance"}),
)  # fmt: skip
#: The columns of ``Store.exits.counts()`` (``store.exits.ExitRepository``).
EXIT_COUNTS = Table(
    ("experiment_id", "config_key", "level", "probe", "run_id", "run_status", "recorded_at",
     "recorder", "isa", "reason", "code", "count", "time_ns", "timed", "iterations",
     "complete", "dropped", "problems", "detail"),
    json=frozenset({"problems", "detail"}),
    booleans=frozenset({"complete"}),
)  # fmt: skip


def hypervisor_of(fingerprint: dict[str, Any] | None) -> str:
    """The hypervisor a fingerprint detected, lowercase, or ``none``."""
    hv = (fingerprint or {}).get("hypervisor") or {}
    vendor = hv.get("vendor") if hv.get("detected") else None
    return str(vendor).lower() if vendor else "none"


def config_parts(rows: Iterable[Sequence[Any]]) -> ConfigParts:
    """(id, config_key, level, labels, target, fingerprint) rows of configurations as what
    their runs' rows show of them: key, level, labels, target and hypervisor."""
    return {
        int(cid): (key, level, dict(labels or {}), target, hypervisor_of(fp))
        for cid, key, level, labels, target, fp in rows
    }


def runs_frame(rows: Sequence[Sequence[Any]], configs: ConfigParts) -> pd.DataFrame:
    """The ``Store.runs()`` frame (``RUN_COLUMNS``) of runs rows (``RUN_QUERY_COLUMNS``)."""
    import pandas as pd  # heavy: pandas, only where frames are made

    df = pd.DataFrame(rows, columns=RUN_QUERY_COLUMNS)
    cfg = [configs[int(cid)] for cid in df["configuration_id"]]
    for pos, name in enumerate(("config", "level", "labels", "target", "hypervisor")):
        df[name] = pd.Series([x[pos] for x in cfg], index=df.index, dtype=object)
    # A run without a boot id (stored before the agent wrote one) was measured in the one
    # boot its configuration had: one stand-in boot per configuration.
    df["boot"] = [
        str(b) if isinstance(b, str) and b else f"{UNRECORDED_BOOT}{int(cid)}"
        for b, cid in zip(df["boot_id"], df["configuration_id"], strict=True)
    ]
    df = df[RUN_COLUMNS].copy()
    # Runs stored before the TSC unit had its honest name read as it is named now.
    df["unit"] = df["unit"].replace(dict.fromkeys(LEGACY_TSC_UNITS, TSC_UNIT))
    for name in SUMMARY_FIELDS:
        df[name] = df[name].astype("Int64" if name in ("n", "steal_ticks") else "float64")
    return df


def utc(value: datetime | None) -> datetime | None:
    """A stored timestamp as a UTC datetime: SQLite hands them back without their zone; they
    were written in UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def experiment_dict(
    row: Row,
    configurations: Iterable[Row],
    run_counts: Iterable[Sequence[Any]],
) -> dict[str, Any]:
    """``Store.experiment()``'s dict: the experiment's row (``EXPERIMENTS``), its
    configurations' rows (``CONFIGURATIONS``, by id) and (status, count) of its runs."""
    out = dict(row)
    out["started_at"], out["ended_at"] = utc(out["started_at"]), utc(out["ended_at"])
    out["configurations"] = [
        {**dict(cfg), "config": cfg["config_key"], "hypervisor": hypervisor_of(cfg["fingerprint"])}
        for cfg in configurations
    ]
    out["run_counts"] = {str(s): int(n) for s, n in run_counts}
    return out


def configurations_frame(rows: Iterable[Row]) -> pd.DataFrame:
    """``Store.configurations()``'s frame (``CONFIGURATION_FRAME_COLUMNS``) of rows of the
    configurations table (``CONFIGURATIONS``)."""
    import pandas as pd  # heavy: pandas, only where frames are made

    return pd.DataFrame(
        [
            [row["id"], row["experiment_id"], row["config_key"], row["level"],
             dict(row["labels"] or {}), row["target"], hypervisor_of(row["fingerprint"]),
             row["fingerprint"], row["provenance"]]
            for row in rows
        ],
        columns=CONFIGURATION_FRAME_COLUMNS,
    )  # fmt: skip


def sample_arrays(rows: Iterable[Sequence[Any]]) -> dict[int, np.ndarray]:
    """(run_id, dtype, codec, count, data) rows of the samples table as ``Store.samples()``
    returns them: each run's values, decoded by the store's codec."""
    from vmtax.store import codec  # heavy: numpy and zstandard, only where samples are read

    return {
        int(run_id): codec.decode(dtype, cdc, int(count), data)
        for run_id, dtype, cdc, count, data in rows
    }


def sqlite_path(url: str | None) -> Path | None:
    """The file of a SQLite store named plainly (a path, ``sqlite:///PATH`` without query or
    escapes, ``$VMTAX_DB`` or the default), as ``store.url.resolve`` finds it; None for
    anything else, which only :class:`Store` reads."""
    if url is not None and not url.strip():
        return None
    raw = url if url else os.environ.get(ENV_VAR) or None
    if raw is None:
        return default_path()
    raw = raw.strip()
    if "://" not in raw:
        return Path(raw).expanduser().absolute()
    prefix = "sqlite:///"
    database = raw[len(prefix) :]
    if not raw.startswith(prefix) or database in ("", ":memory:") or set(database) & set("?#%"):
        return None
    return Path(database).expanduser().absolute()


class _Sampling:
    """Adaptive sampling's outcomes, as ``Store.sampling`` has them
    (``SamplingRepository.outcomes``)."""

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader

    def outcomes(self, experiment_ids: Sequence[int]) -> pd.DataFrame:
        """One row per (configuration, probe) that adaptive sampling finished in the given
        experiments, with the configuration's key and level (``OUTCOME_COLUMNS``)."""
        import pandas as pd  # heavy: pandas, only where frames are made

        from vmtax.store.sampling import OUTCOME_COLUMNS  # heavy: it loads pandas at its top

        if not experiment_ids:
            return pd.DataFrame(columns=OUTCOME_COLUMNS)
        ids = [int(i) for i in experiment_ids]

        def read() -> pd.DataFrame:
            rows = self._reader._query(
                "SELECT o.configuration_id, o.experiment_id, c.config_key, c.level, o.probe, "
                "o.n_runs, o.mean, o.half_width, o.target, o.status, o.reason, o.duration_s, "
                "o.iterations FROM sampling_outcomes AS o JOIN configurations AS c "
                f"ON c.id = o.configuration_id WHERE o.experiment_id IN ({_marks(ids)}) "
                "ORDER BY o.configuration_id, o.probe",
                ids,
            )
            return pd.DataFrame(rows, columns=OUTCOME_COLUMNS)

        return self._reader._read(read, lambda store: store.sampling.outcomes(experiment_ids))


class _Exits:
    """Exit profiles' counts, as ``Store.exits`` has them (``ExitRepository.counts``)."""

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader

    def counts(self, experiment_id: int) -> pd.DataFrame:
        """Every stored exit count of an experiment joined to its run, configuration and
        iterations executed: one row per (run, recording level, reason), or one row with
        reason None for a profile without counts (``EXIT_COUNTS``)."""
        import pandas as pd  # heavy: pandas, only where frames are made

        def read() -> pd.DataFrame:
            rows = self._reader._query(
                "SELECT r.experiment_id, cfg.config_key, cfg.level, r.probe, r.id, r.status, "
                "p.recorded_at, p.recorder, p.isa, c.reason, c.code, c.count, c.time_ns, "
                "c.timed, s.iterations, p.complete, p.dropped, p.problems, p.detail "
                "FROM exit_profiles AS p JOIN runs AS r ON r.id = p.run_id "
                "JOIN configurations AS cfg ON cfg.id = r.configuration_id "
                "LEFT OUTER JOIN exit_counts AS c ON c.profile_id = p.id "
                "LEFT OUTER JOIN (SELECT run_id, sum(count) AS iterations FROM samples "
                "GROUP BY run_id) AS s ON s.run_id = r.id "
                "WHERE r.experiment_id = ? ORDER BY r.id, p.recorded_at, c.code",
                [int(experiment_id)],
            )
            decoded = [list(EXIT_COUNTS.decoded(row).values()) for row in rows]
            return pd.DataFrame(decoded, columns=list(EXIT_COUNTS.columns))

        return self._reader._read(read, lambda store: store.exits.counts(experiment_id))


class StoreReader:
    """A store opened for reading; open it with :meth:`StoreReader.open`, as a context
    manager. Its methods answer as :class:`Store`'s of the same name."""

    def __init__(self, url: str | None, path: Path | None, busy_timeout: float) -> None:
        self._url = url
        self._busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None
        self._store: Store | None = None
        self.url_display = f"sqlite:///{path}" if path is not None else ""
        self.sampling = _Sampling(self)
        self.exits = _Exits(self)
        # The runs of each set of experiments, read once: compare asks for its selectors' runs
        # and then for the baseline's, from the same experiments (frames are never changed
        # in place: runs() hands out new ones).
        self._runs: dict[tuple[int, ...] | None, pd.DataFrame] = {}
        if path is not None and path.is_file():
            try:
                self._connection = sqlite3.connect(path, timeout=busy_timeout)
                versions = self._connection.execute(
                    f"SELECT version_num FROM {revision.VERSION_TABLE}"
                ).fetchall()
            except sqlite3.Error:
                versions = []
            if [v for (v,) in versions] != [revision.HEAD]:
                self._close_connection()  # not a current store: Store opens it, or says why
        if self._connection is None:
            self.url_display = self.store().url_display

    @classmethod
    def open(cls, url: str | None = None, *, busy_timeout: float = 5.0) -> StoreReader:
        """Open the store at ``url`` (as ``Store.open(url, read_only=True)`` does) for
        reading; a SQLite store at the newest revision is read without SQLAlchemy."""
        return cls(url, sqlite_path(url), busy_timeout)

    @property
    def direct(self) -> bool:
        """Whether this store is read through the sqlite3 driver (not through Store)."""
        return self._connection is not None

    def store(self) -> Store:
        """The store opened as :class:`Store` (read-only), for what this door does not
        serve; opened when first asked for."""
        if self._store is None:
            from vmtax.store.store import Store  # heavy: SQLAlchemy, only when needed

            self._store = Store.open(self._url, read_only=True, busy_timeout=self._busy_timeout)
        return self._store

    def close(self) -> None:
        self._close_connection()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        assert self._connection is not None
        try:
            return self._connection.execute(sql, params).fetchall()
        except sqlite3.Error:
            # Locked, damaged or changed under us: the store's own door says what it is.
            self._close_connection()
            raise _Unread from None

    def _read(self, direct: Callable[[], T], via_store: Callable[[Store], T]) -> T:
        """``direct()`` through the sqlite3 driver; ``via_store`` on the store's own door where
        this store is not read that way, or the driver could not read it (``_Unread``)."""
        if self.direct:
            try:
                return direct()
            except _Unread:
                pass  # the connection is closed: Store reads from here on
        return via_store(self.store())

    # -- what compare and report read ------------------------------------------------------

    def latest_experiment_id(self) -> int | None:
        """The newest experiment's id, or None in an empty store."""

        def read() -> int | None:
            value = self._query("SELECT max(id) FROM experiments")[0][0]
            return None if value is None else int(value)

        return self._read(read, lambda store: store.latest_experiment_id())

    def runs(self, selectors: Sequence[str] = ()) -> pd.DataFrame:
        """Runs matching any of ``selectors`` (all runs when empty), see ``store.select``."""

        def read() -> pd.DataFrame:
            parsed = [sel.parse(s) for s in selectors]  # malformed input fails before a query
            self._check_experiments_exist(sel.named_experiment_ids(parsed))
            df = self._all_runs(sel.experiment_ids(parsed, self.latest_experiment_id))
            return sel.matching(df, parsed)

        return self._read(read, lambda store: store.runs(selectors))

    def experiments(self) -> pd.DataFrame:
        """One row per experiment (``Store.experiments``; read through Store)."""
        return self.store().experiments()

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        """One experiment as a dict, with its configurations and run counts per status."""
        exp_id = [int(experiment_id)]

        def read() -> dict[str, Any]:
            found = self._query(
                f"SELECT {', '.join(EXPERIMENTS.columns)} FROM experiments WHERE id = ?", exp_id
            )
            if not found:
                raise VmtaxError(f"no experiment {experiment_id} in {self.url_display}")
            configs = self._query(
                f"SELECT {', '.join(CONFIGURATIONS.columns)} FROM configurations "
                "WHERE experiment_id = ? ORDER BY id",
                exp_id,
            )
            counts = self._query(
                "SELECT status, count(*) FROM runs WHERE experiment_id = ? GROUP BY status",
                exp_id,
            )
            cfgs = [CONFIGURATIONS.decoded(c) for c in configs]
            return experiment_dict(EXPERIMENTS.decoded(found[0]), cfgs, counts)

        return self._read(read, lambda store: store.experiment(experiment_id))

    def configurations(self, configuration_ids: Iterable[int] | None = None) -> pd.DataFrame:
        """Configurations (all, or the given ids) with their fingerprints and provenance
        (``Store.configurations``)."""
        ids = None if configuration_ids is None else sorted({int(i) for i in configuration_ids})
        sql = f"SELECT {', '.join(CONFIGURATIONS.columns)} FROM configurations"
        if ids is not None:
            sql += f" WHERE id IN ({_marks(ids)})"

        def read() -> pd.DataFrame:
            rows = [] if ids == [] else self._query(sql + " ORDER BY id", ids or [])
            return configurations_frame([CONFIGURATIONS.decoded(row) for row in rows])

        return self._read(read, lambda store: store.configurations(ids))

    def samples(self, run_ids: Iterable[int], *, warmup: bool = False) -> dict[int, np.ndarray]:
        """Raw values per run id (float64, iteration order); warm-up values if ``warmup``.
        Run ids that are not in the store are left out of the result."""
        ids = sorted({int(i) for i in run_ids})
        kind = "warmup" if warmup else "measured"

        def read() -> dict[int, np.ndarray]:
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                rows += self._query(
                    "SELECT run_id, dtype, codec, count, data FROM samples "
                    f"WHERE kind = ? AND run_id IN ({_marks(chunk)})",
                    [kind, *chunk],
                )
            return sample_arrays(rows)

        return self._read(read, lambda store: store.samples(ids, warmup=warmup))

    def has_noise_profiles(self) -> bool:
        """Whether any noise profile is stored."""
        return self._read(
            lambda: bool(self._query("SELECT 1 FROM noise_profiles LIMIT 1")),
            lambda store: bool(store.noise.rows()),
        )

    def _check_experiments_exist(self, ids: set[int]) -> None:
        if not ids:
            return
        wanted = sorted(ids)
        found = {
            int(i)
            for (i,) in self._query(
                f"SELECT id FROM experiments WHERE id IN ({_marks(wanted)})", wanted
            )
        }
        missing = sorted(ids - found)
        if missing:
            raise VmtaxError(f"no experiment {missing[0]} in {self.url_display}")

    def _all_runs(self, experiment_ids: set[int] | None) -> pd.DataFrame:
        key = None if experiment_ids is None else tuple(sorted(experiment_ids))
        if key not in self._runs:
            self._runs[key] = self._read_runs(experiment_ids)
        return self._runs[key]

    def _read_runs(self, experiment_ids: set[int] | None) -> pd.DataFrame:
        columns = ", ".join(["id", *RUN_QUERY_COLUMNS[1:]])
        runs_sql = f"SELECT {columns} FROM runs"
        cfg_sql = "SELECT id, config_key, level, labels, target, fingerprint FROM configurations"
        params: list[int] = []
        if experiment_ids is not None:
            params = sorted(experiment_ids)
            runs_sql += f" WHERE experiment_id IN ({_marks(params)})"
            cfg_sql += f" WHERE experiment_id IN ({_marks(params)})"
        rows = self._query(runs_sql + " ORDER BY id", params)
        configs = config_parts(
            (cid, key, level, _json(labels), target, _json(fp))
            for cid, key, level, labels, target, fp in self._query(cfg_sql, params)
        )
        return runs_frame(rows, configs)


class _Unread(Exception):
    """The driver could not read the store: ask Store instead."""


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _json(text: Any) -> Any:
    """A JSON column's value as SQLAlchemy's JSON type gives it back."""
    return None if text is None else json.loads(text)

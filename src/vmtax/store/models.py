"""The store's tables. The Alembic revisions in ``migrations/versions`` create exactly these;
``tests/test_store_schema.py`` checks that the two never drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Experiment(Base):
    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    command: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    suite: Mapped[str] = mapped_column(String(200), nullable=False)
    seed: Mapped[int] = mapped_column(BigInteger, nullable=False)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    vmtax_version: Mapped[str] = mapped_column(String(64), nullable=False)
    agent_version: Mapped[str | None] = mapped_column(String(64))
    host: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16), nullable=False)


class Configuration(Base):
    __tablename__ = "configurations"
    __table_args__ = (UniqueConstraint("experiment_id", "config_key", name="uq_config_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    )
    level: Mapped[str] = mapped_column(String(32), nullable=False)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    config_key: Mapped[str] = mapped_column(String(500), nullable=False)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    target: Mapped[str] = mapped_column(String(255), nullable=False)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        # A completed run is written once: resuming an experiment must not add it again.
        # Failed and lost attempts stay as history, so the uniqueness covers ok runs only.
        Index(
            "uq_run_ok",
            "experiment_id",
            "configuration_id",
            "probe",
            "plan_index",
            "run_index",
            unique=True,
            sqlite_where=text("status = 'ok'"),
            postgresql_where=text("status = 'ok'"),
        ),
        Index("ix_runs_experiment", "experiment_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    )
    configuration_id: Mapped[int] = mapped_column(
        ForeignKey("configurations.id", ondelete="CASCADE"), nullable=False
    )
    probe: Mapped[str] = mapped_column(String(100), nullable=False)
    unit: Mapped[str | None] = mapped_column(String(32))
    better: Mapped[str | None] = mapped_column(String(8))
    throughput_unit: Mapped[str | None] = mapped_column(String(32))
    plan_index: Mapped[int] = mapped_column(Integer, nullable=False)
    run_index: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(8), nullable=False)
    n: Mapped[int | None] = mapped_column(Integer)
    mean: Mapped[float | None] = mapped_column(Float)
    median: Mapped[float | None] = mapped_column(Float)
    stddev: Mapped[float | None] = mapped_column(Float)
    min: Mapped[float | None] = mapped_column(Float)
    max: Mapped[float | None] = mapped_column(Float)
    p95: Mapped[float | None] = mapped_column(Float)
    p99: Mapped[float | None] = mapped_column(Float)
    wall_s: Mapped[float | None] = mapped_column(Float)
    ops_per_sec: Mapped[float | None] = mapped_column(Float)
    throughput: Mapped[float | None] = mapped_column(Float)
    steal_ticks: Mapped[int | None] = mapped_column(BigInteger)
    header: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    summary_extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class SampleBlock(Base):
    """All samples of one kind of one run, as one compressed float64 array."""

    __tablename__ = "samples"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)  # measured | warmup
    dtype: Mapped[str] = mapped_column(String(8), nullable=False)
    codec: Mapped[str] = mapped_column(String(16), nullable=False)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    data: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)

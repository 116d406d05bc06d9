"""The store's tables. The Alembic revisions in ``migrations/versions`` create exactly these;
``tests/test_store_schema.py`` checks that the two never drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    # Every model here is declared with columns, so its ``__table__`` is a Table (the
    # declarative base only promises a FromClause, which has no insert()).
    __table__: ClassVar[Table]


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
    # When the controller started and ended the run: its monotonic clock (ns, comparable
    # within one controller process) and UTC wall time. NULL for runs stored before 0005.
    started_ns: Mapped[int | None] = mapped_column(BigInteger)
    ended_ns: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The agent header's boot id: runs sharing it share one boot. NULL before 0006.
    boot_id: Mapped[str | None] = mapped_column(String(64))


class SampleBlock(Base):
    """All samples of one kind of one run, as one compressed float64 array."""

    __tablename__ = "samples"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)  # measured | warmup
    dtype: Mapped[str] = mapped_column(String(8), nullable=False)
    codec: Mapped[str] = mapped_column(String(16), nullable=False)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    data: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)


class SweepStep(Base):
    """One step of an overcommitment sweep (``vmtax sweep``): its size and outcome.

    A committed step is ``ok`` and written once per experiment (resume skips it); a step
    whose guests failed to boot or whose workload broke is kept as ``failed`` history.
    """

    __tablename__ = "sweep_steps"
    __table_args__ = (
        Index(
            "uq_sweep_step_ok",
            "experiment_id",
            "step_index",
            unique=True,
            sqlite_where=text("status = 'ok'"),
            postgresql_where=text("status = 'ok'"),
        ),
        Index("ix_sweep_steps_experiment", "experiment_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    )
    step_index: Mapped[int] = mapped_column(Integer, nullable=False)
    ratio: Mapped[float] = mapped_column(Float, nullable=False)
    axis: Mapped[str] = mapped_column(String(16), nullable=False)
    status: Mapped[str] = mapped_column(String(8), nullable=False)
    guests: Mapped[int] = mapped_column(Integer, nullable=False)
    vcpus: Mapped[int] = mapped_column(Integer, nullable=False)
    guest_memory_mb: Mapped[int] = mapped_column(Integer, nullable=False)
    host_cpus: Mapped[int] = mapped_column(Integer, nullable=False)
    host_memory_mb: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SweepSample(Base):
    """One fixed-interval sample of a sweep step, in its warm-up or steady-state window."""

    __tablename__ = "sweep_samples"

    step_id: Mapped[int] = mapped_column(
        ForeignKey("sweep_steps.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(8), nullable=False)  # warmup | window
    t_s: Mapped[float] = mapped_column(Float, nullable=False)
    throughput: Mapped[float | None] = mapped_column(Float)
    transactions: Mapped[int | None] = mapped_column(Integer)
    resp_mean_s: Mapped[float | None] = mapped_column(Float)
    resp_p95_s: Mapped[float | None] = mapped_column(Float)
    host_util: Mapped[float | None] = mapped_column(Float)
    guest_util: Mapped[float | None] = mapped_column(Float)
    steal: Mapped[float | None] = mapped_column(Float)
    vcpu_wait: Mapped[float | None] = mapped_column(Float)
    rss_mb: Mapped[float | None] = mapped_column(Float)
    major_faults: Mapped[float | None] = mapped_column(Float)
    memory: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    per_guest: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)


class ExitProfile(Base):
    """The VM exits one host level recorded during one run (``vmtax run --exits``).

    ``recorded_at`` is the level whose KVM counted them (L0 = this machine, L1 = the L1
    guest's KVM ...). A profile whose recording failed or lost events has ``complete`` false
    and says why in ``problems``; the run itself is kept either way.
    """

    __tablename__ = "exit_profiles"
    __table_args__ = (
        UniqueConstraint("run_id", "recorded_at", name="uq_exit_profile_run_level"),
        Index("ix_exit_profiles_run", "run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), nullable=False)
    recorded_at: Mapped[str] = mapped_column(String(32), nullable=False)
    recorder: Mapped[str] = mapped_column(String(32), nullable=False)  # tracefs | perf
    isa: Mapped[str | None] = mapped_column(String(8))
    hits: Mapped[int | None] = mapped_column(BigInteger)
    dropped: Mapped[int | None] = mapped_column(BigInteger)
    window_ns: Mapped[int | None] = mapped_column(BigInteger)
    complete: Mapped[bool] = mapped_column(Boolean, nullable=False)
    problems: Mapped[list[str] | None] = mapped_column(JSON)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ExitCount(Base):
    """One exit reason of one profile: how often, and the summed handling time
    (exit to the next entry of the same vCPU thread; ``timed`` exits had an entry)."""

    __tablename__ = "exit_counts"

    profile_id: Mapped[int] = mapped_column(
        ForeignKey("exit_profiles.id", ondelete="CASCADE"), primary_key=True
    )
    code: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), nullable=False)
    count: Mapped[int] = mapped_column(BigInteger, nullable=False)
    time_ns: Mapped[int | None] = mapped_column(BigInteger)
    timed: Mapped[int | None] = mapped_column(BigInteger)


class SamplingLook(Base):
    """One look of adaptive sampling at one configuration (``vmtax run --precision``): the
    decision per probe, the budget spent so far and the machine's noise sampled just before
    the runs the look judged and just after them (see vmtax.sampling)."""

    __tablename__ = "sampling_looks"
    __table_args__ = (Index("ix_sampling_looks_experiment", "experiment_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    )
    configuration_id: Mapped[int] = mapped_column(
        ForeignKey("configurations.id", ondelete="CASCADE"), nullable=False
    )
    look: Mapped[int] = mapped_column(Integer, nullable=False)
    spent_s: Mapped[float] = mapped_column(Float, nullable=False)
    decisions: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    noise_before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    noise_after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class SamplingOutcome(Base):
    """Where adaptive sampling left one probe of one configuration: precise (the target was
    reached) or imprecise (the budget ended first), with the half-width reached and the run
    length that was chosen. Rewritten by each resume of the experiment."""

    __tablename__ = "sampling_outcomes"

    configuration_id: Mapped[int] = mapped_column(
        ForeignKey("configurations.id", ondelete="CASCADE"), primary_key=True
    )
    probe: Mapped[str] = mapped_column(String(100), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), nullable=False
    )
    n_runs: Mapped[int] = mapped_column(Integer, nullable=False)
    mean: Mapped[float | None] = mapped_column(Float)
    half_width: Mapped[float | None] = mapped_column(Float)  # relative to the mean
    target: Mapped[float] = mapped_column(Float, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)  # precise | imprecise
    reason: Mapped[str] = mapped_column(String(16), nullable=False)
    duration_s: Mapped[float | None] = mapped_column(Float)
    iterations: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class NoiseProfile(Base):
    """One probe's noise profile on one machine in one configuration (``vmtax calibrate``,
    vmtax.noise): the sums of squares of every experiment it was learnt from (``sources``),
    the estimates they give with their intervals and degrees of freedom, and the boot's and
    run's cost. Grown in place by later experiments of the same machine and configuration."""

    __tablename__ = "noise_profiles"
    __table_args__ = (
        UniqueConstraint(
            "machine", "configuration", "probe", "metric", name="uq_noise_profile_key"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    machine: Mapped[str] = mapped_column(String(64), nullable=False)  # SHA-256 of its fields
    machine_fields: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    configuration: Mapped[str] = mapped_column(String(500), nullable=False)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False)
    probe: Mapped[str] = mapped_column(String(100), nullable=False)
    metric: Mapped[str] = mapped_column(String(32), nullable=False)
    between: Mapped[float | None] = mapped_column(Float)
    between_low: Mapped[float | None] = mapped_column(Float)
    between_high: Mapped[float | None] = mapped_column(Float)
    df_between: Mapped[float | None] = mapped_column(Float)
    within: Mapped[float | None] = mapped_column(Float)
    within_low: Mapped[float | None] = mapped_column(Float)
    within_high: Mapped[float | None] = mapped_column(Float)
    df_within: Mapped[float | None] = mapped_column(Float)
    boots: Mapped[int] = mapped_column(Integer, nullable=False)
    runs: Mapped[int] = mapped_column(Integer, nullable=False)
    boot_cost_s: Mapped[float | None] = mapped_column(Float)
    run_cost_s: Mapped[float | None] = mapped_column(Float)
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    made_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

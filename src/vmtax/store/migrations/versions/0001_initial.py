"""Initial schema: experiments, configurations, runs and compressed sample blocks.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the first schema."""
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("suite", sa.String(200), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("vmtax_version", sa.String(64), nullable=False),
        sa.Column("agent_version", sa.String(64), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_table(
        "configurations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("level", sa.String(32), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.String(500), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.UniqueConstraint("experiment_id", "config_key", name="uq_config_key"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "configuration_id",
            sa.Integer(),
            sa.ForeignKey("configurations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("probe", sa.String(100), nullable=False),
        sa.Column("unit", sa.String(32), nullable=True),
        sa.Column("better", sa.String(8), nullable=True),
        sa.Column("throughput_unit", sa.String(32), nullable=True),
        sa.Column("plan_index", sa.Integer(), nullable=False),
        sa.Column("run_index", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("n", sa.Integer(), nullable=True),
        sa.Column("mean", sa.Float(), nullable=True),
        sa.Column("median", sa.Float(), nullable=True),
        sa.Column("stddev", sa.Float(), nullable=True),
        sa.Column("min", sa.Float(), nullable=True),
        sa.Column("max", sa.Float(), nullable=True),
        sa.Column("p95", sa.Float(), nullable=True),
        sa.Column("p99", sa.Float(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("ops_per_sec", sa.Float(), nullable=True),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("steal_ticks", sa.BigInteger(), nullable=True),
        sa.Column("header", sa.JSON(), nullable=True),
        sa.Column("summary_extra", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "uq_run_ok",
        "runs",
        ["experiment_id", "configuration_id", "probe", "plan_index", "run_index"],
        unique=True,
        sqlite_where=sa.text("status = 'ok'"),
        postgresql_where=sa.text("status = 'ok'"),
    )
    op.create_index("ix_runs_experiment", "runs", ["experiment_id"])
    op.create_table(
        "samples",
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("dtype", sa.String(8), nullable=False),
        sa.Column("codec", sa.String(16), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    """Drop everything (only for tests of the migration machinery)."""
    op.drop_table("samples")
    op.drop_index("ix_runs_experiment", table_name="runs")
    op.drop_index("uq_run_ok", table_name="runs")
    op.drop_table("runs")
    op.drop_table("configurations")
    op.drop_table("experiments")

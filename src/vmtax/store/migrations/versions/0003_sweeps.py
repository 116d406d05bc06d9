"""Overcommitment sweeps: steps and their window samples.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``sweep_steps`` and ``sweep_samples``."""
    op.create_table(
        "sweep_steps",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("axis", sa.String(16), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("guests", sa.Integer(), nullable=False),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("guest_memory_mb", sa.Integer(), nullable=False),
        sa.Column("host_cpus", sa.Integer(), nullable=False),
        sa.Column("host_memory_mb", sa.Integer(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "uq_sweep_step_ok",
        "sweep_steps",
        ["experiment_id", "step_index"],
        unique=True,
        sqlite_where=sa.text("status = 'ok'"),
        postgresql_where=sa.text("status = 'ok'"),
    )
    op.create_index("ix_sweep_steps_experiment", "sweep_steps", ["experiment_id"])
    op.create_table(
        "sweep_samples",
        sa.Column(
            "step_id",
            sa.Integer(),
            sa.ForeignKey("sweep_steps.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("phase", sa.String(8), nullable=False),
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("transactions", sa.Integer(), nullable=True),
        sa.Column("resp_mean_s", sa.Float(), nullable=True),
        sa.Column("resp_p95_s", sa.Float(), nullable=True),
        sa.Column("host_util", sa.Float(), nullable=True),
        sa.Column("guest_util", sa.Float(), nullable=True),
        sa.Column("steal", sa.Float(), nullable=True),
        sa.Column("vcpu_wait", sa.Float(), nullable=True),
        sa.Column("rss_mb", sa.Float(), nullable=True),
        sa.Column("major_faults", sa.Float(), nullable=True),
        sa.Column("memory", sa.JSON(), nullable=True),
        sa.Column("per_guest", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    """Drop the sweep tables."""
    op.drop_table("sweep_samples")
    op.drop_index("ix_sweep_steps_experiment", table_name="sweep_steps")
    op.drop_index("uq_sweep_step_ok", table_name="sweep_steps")
    op.drop_table("sweep_steps")

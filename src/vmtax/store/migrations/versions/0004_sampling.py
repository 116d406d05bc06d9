"""Adaptive sampling: looks, chosen run lengths and interference samples.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``sampling_looks`` and ``sampling_outcomes``."""
    op.create_table(
        "sampling_looks",
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
        sa.Column("look", sa.Integer(), nullable=False),
        sa.Column("spent_s", sa.Float(), nullable=False),
        sa.Column("decisions", sa.JSON(), nullable=False),
        sa.Column("noise_before", sa.JSON(), nullable=True),
        sa.Column("noise_after", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sampling_looks_experiment", "sampling_looks", ["experiment_id"])
    op.create_table(
        "sampling_outcomes",
        sa.Column(
            "configuration_id",
            sa.Integer(),
            sa.ForeignKey("configurations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("probe", sa.String(100), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("n_runs", sa.Integer(), nullable=False),
        sa.Column("mean", sa.Float(), nullable=True),
        sa.Column("half_width", sa.Float(), nullable=True),
        sa.Column("target", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("iterations", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop the sampling tables."""
    op.drop_table("sampling_outcomes")
    op.drop_index("ix_sampling_looks_experiment", table_name="sampling_looks")
    op.drop_table("sampling_looks")

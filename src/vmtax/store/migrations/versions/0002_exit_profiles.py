"""Exit profiles by VM-exit reason, per run.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add exit_profiles (one per run and recording level) and exit_counts (per reason)."""
    op.create_table(
        "exit_profiles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("recorded_at", sa.String(32), nullable=False),
        sa.Column("recorder", sa.String(32), nullable=False),
        sa.Column("isa", sa.String(8), nullable=True),
        sa.Column("hits", sa.BigInteger(), nullable=True),
        sa.Column("dropped", sa.BigInteger(), nullable=True),
        sa.Column("window_ns", sa.BigInteger(), nullable=True),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("problems", sa.JSON(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "recorded_at", name="uq_exit_profile_run_level"),
    )
    op.create_index("ix_exit_profiles_run", "exit_profiles", ["run_id"])
    op.create_table(
        "exit_counts",
        sa.Column(
            "profile_id",
            sa.Integer(),
            sa.ForeignKey("exit_profiles.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("code", sa.BigInteger(), primary_key=True),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("time_ns", sa.BigInteger(), nullable=True),
        sa.Column("timed", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    """Drop the exit-profile tables."""
    op.drop_table("exit_counts")
    op.drop_index("ix_exit_profiles_run", table_name="exit_profiles")
    op.drop_table("exit_profiles")

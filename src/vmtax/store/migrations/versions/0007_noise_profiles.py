"""Noise profiles: variance components per machine, configuration and probe (vmtax calibrate).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``noise_profiles``."""
    op.create_table(
        "noise_profiles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("machine", sa.String(64), nullable=False),
        sa.Column("machine_fields", sa.JSON(), nullable=False),
        sa.Column("configuration", sa.String(500), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("probe", sa.String(100), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("between", sa.Float(), nullable=True),
        sa.Column("between_low", sa.Float(), nullable=True),
        sa.Column("between_high", sa.Float(), nullable=True),
        sa.Column("df_between", sa.Float(), nullable=True),
        sa.Column("within", sa.Float(), nullable=True),
        sa.Column("within_low", sa.Float(), nullable=True),
        sa.Column("within_high", sa.Float(), nullable=True),
        sa.Column("df_within", sa.Float(), nullable=True),
        sa.Column("boots", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("boot_cost_s", sa.Float(), nullable=True),
        sa.Column("run_cost_s", sa.Float(), nullable=True),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "machine", "configuration", "probe", "metric", name="uq_noise_profile_key"
        ),
    )


def downgrade() -> None:
    """Drop ``noise_profiles``."""
    op.drop_table("noise_profiles")

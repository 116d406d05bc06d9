"""Run start and end times, so the executed order of runs can be audited.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

Runs stored before this revision keep NULL in all four columns: their order was never recorded
(the agent's header has one-second resolution), and nothing is made up for them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = ("started_ns", "ended_ns", "started_at", "ended_at")


def upgrade() -> None:
    """Add the controller's monotonic ns and UTC wall times of each run's start and end."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("started_ns", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("ended_ns", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the run times."""
    with op.batch_alter_table("runs") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)

"""The boot each run ran in, so the runs of one boot are not taken for independent boots.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26

``boot_id`` is the agent header's ``boot_id`` (the kernel's ``/proc/sys/kernel/random/boot_id``
where the agent ran). Runs stored before this revision come from agents that did not write it,
so they keep NULL and nothing is made up for them; the store reads them as one boot per
configuration (``Store.runs``), which is what they were: every level was booted once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add runs.boot_id (NULL for runs whose header does not name a boot)."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("boot_id", sa.String(64), nullable=True))


def downgrade() -> None:
    """Drop runs.boot_id."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("boot_id")

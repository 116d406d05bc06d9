"""Exit profiles by VM-exit reason, per run.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Filled in by the change that needs it (placeholder in the chain)."""


def downgrade() -> None:
    """Filled in by the change that needs it (placeholder in the chain)."""

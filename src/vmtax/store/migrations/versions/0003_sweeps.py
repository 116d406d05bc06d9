"""Overcommitment sweeps: steps and their window samples.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Filled in by the change that needs it (placeholder in the chain)."""


def downgrade() -> None:
    """Filled in by the change that needs it (placeholder in the chain)."""

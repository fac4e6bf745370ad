"""Create craft_library_sync: the operator's record of each sandbox's synced library.

Revision ID: 0003_library_sync
Revises: 0002_job_sweep
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from craft_operator.credentials.tables import UtcDateTime

revision = "0003_library_sync"
down_revision = "0002_job_sweep"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "craft_library_sync",
        sa.Column("sandbox_uid", sa.String(length=64), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("pod_uid", sa.String(length=64), nullable=False),
        sa.Column("digests", sa.String(length=400), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("entries", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("sandbox_uid"),
    )


def downgrade() -> None:
    op.drop_table("craft_library_sync")

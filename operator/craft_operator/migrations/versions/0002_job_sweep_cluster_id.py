"""Add craft_sandbox_credential.cluster_id: which cluster's operator minted the row.

Rows written before this revision keep NULL: the orphan sweep never touches them (it
cannot tell this cluster's rows from another's); ``craft-operator credentials adopt``
claims them, and a renewal by this cluster's operator sets the column.

Revision ID: 0002_job_sweep
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_job_sweep"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.add_column(sa.Column("cluster_id", sa.String(length=128), nullable=True))
    op.create_index(
        "ix_craft_sandbox_credential_cluster_id", "craft_sandbox_credential", ["cluster_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_craft_sandbox_credential_cluster_id", table_name="craft_sandbox_credential")
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.drop_column("cluster_id")

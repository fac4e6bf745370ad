"""Create craft_sandbox_credential: one encrypted PAT per sandbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from craft_operator.credentials.tables import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "craft_sandbox_credential",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("sandbox_uid", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=63), nullable=False),
        sa.Column("pat_id", sa.Integer(), nullable=False),
        sa.Column("token_display", sa.String(length=32), nullable=False),
        sa.Column("encrypted_token", sa.LargeBinary(), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "name", name="uq_craft_sandbox_credential_sandbox"),
    )
    op.create_index("ix_craft_sandbox_credential_key_id", "craft_sandbox_credential", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_craft_sandbox_credential_key_id", table_name="craft_sandbox_credential")
    op.drop_table("craft_sandbox_credential")

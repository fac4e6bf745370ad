"""Add ``superseded_pat_id`` to craft_sandbox_credential: the PAT in its renewal grace.

A renewed PAT no longer revokes the one it replaces at once: the old one stays live (its
``expires_at`` shortened to the end of the grace period, CRAFT_CREDENTIAL_RENEWAL_GRACE)
until the pod is shown to use the new one, and the row records it here so that it can be
revoked then, or with the sandbox. NULL: no PAT is in its grace period (rows from before
this revision included).

Downgrade drops the column: a PAT still in its grace period then simply expires at the end
of it (Onyx's server enforces ``expires_at``), unrevoked.

Revision ID: 0004_superseded_pat
Revises: 0003_library_sync
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_superseded_pat"
down_revision = "0003_library_sync"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.add_column(sa.Column("superseded_pat_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.drop_column("superseded_pat_id")

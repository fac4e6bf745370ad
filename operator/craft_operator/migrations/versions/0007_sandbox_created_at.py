"""Add ``sandbox_created_at`` to craft_sandbox_credential: when the row's sandbox was made.

A sandbox deleted and made again under its name has a new uid; a pass for the deleted one
that runs late (a replica that has not yet stood by, a database call that hung for
minutes) took the new one's row for an earlier sandbox's and replaced it, revoking the live
PAT of the sandbox that exists. With the creation time of each row's sandbox (its
``creationTimestamp``) the store tells an earlier sandbox of that name from a later one,
and leaves a later one's row alone. NULL: not known (rows from before this revision, or
written by an operator before it during a rolling upgrade): then the store judges as
before, by when the row was written.

Downgrade drops the column; nothing else depends on it.

Revision ID: 0007_sandbox_created_at
Revises: 0006_cluster_key_repair
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_sandbox_created_at"
down_revision = "0006_cluster_key_repair"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.add_column(sa.Column("sandbox_created_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.drop_column("sandbox_created_at")

"""Index craft_sandbox_credential by ``sandbox_uid``.

A library sync's record is written only while its sandbox's credential row exists, read
under a lock by ``sandbox_uid`` (see credentials/library_records.py): without the index
every such write scanned the table.

Downgrade drops the index; nothing else depends on it.

Revision ID: 0005_credential_sandbox_uid
Revises: 0004_superseded_pat
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0005_credential_sandbox_uid"
down_revision = "0004_superseded_pat"
branch_labels = None
depends_on = None

INDEX = "ix_craft_sandbox_credential_sandbox_uid"


def upgrade() -> None:
    op.create_index(INDEX, "craft_sandbox_credential", ["sandbox_uid"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="craft_sandbox_credential")

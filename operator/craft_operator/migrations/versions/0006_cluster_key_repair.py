"""Repair the per-cluster key of craft_sandbox_credential where revision 0002 left it out.

Revision ``0002_job_sweep`` shipped first (on 2026-11-23, for about twenty minutes of the
main branch) as a ``cluster_id`` column with a plain index, the (namespace, name) unique
constraint left in place; it was then rewritten under the same id to replace that
constraint with (cluster_id, namespace, name). A database migrated by the first version is
past 0002 and was never given the new key: a second cluster sharing it, or a sandbox
recreated beside a row from before cluster ids, could not write its own row (every attempt
a unique violation, read as a lost race, until "gave up after 8 attempts").

This revision looks at the table and brings it to the shape 0002 now makes: the
(namespace, name) constraint dropped, the (cluster_id, namespace, name) one created, the
first version's index dropped (the constraint's own index serves). On a database 0002
migrated as it is now it changes nothing. Downgrade changes nothing either: 0002's own
downgrade restores the (namespace, name) constraint.

Revision ID: 0006_cluster_key_repair
Revises: 0005_credential_sandbox_uid
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_cluster_key_repair"
down_revision = "0005_credential_sandbox_uid"
branch_labels = None
depends_on = None

TABLE = "craft_sandbox_credential"
PER_CLUSTER = "uq_craft_sandbox_credential_cluster_sandbox"
PER_CLUSTER_COLUMNS = ["cluster_id", "namespace", "name"]
FIRST_INDEX = "ix_craft_sandbox_credential_cluster_id"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    uniques = inspector.get_unique_constraints(TABLE)
    per_sandbox = [
        unique["name"]
        for unique in uniques
        if unique["column_names"] == ["namespace", "name"] and unique["name"]
    ]
    has_per_cluster = any(unique["column_names"] == PER_CLUSTER_COLUMNS for unique in uniques)
    first_index = any(index["name"] == FIRST_INDEX for index in inspector.get_indexes(TABLE))
    if not per_sandbox and has_per_cluster and not first_index:
        return
    if first_index:
        op.drop_index(FIRST_INDEX, table_name=TABLE)
    with op.batch_alter_table(TABLE) as batch:
        for name in per_sandbox:
            batch.drop_constraint(name, type_="unique")
        if not has_per_cluster:
            batch.create_unique_constraint(PER_CLUSTER, PER_CLUSTER_COLUMNS)


def downgrade() -> None:
    pass

"""Key craft_sandbox_credential by cluster: add ``cluster_id``, unique per (cluster, sandbox).

Several clusters' operators may share Onyx's Postgres, each with its own sandbox
``ns/x``. Keyed on (namespace, name) alone they shared one row and fought over it (each
mint revoked the other's live PAT, and deleting ``x`` in one cluster revoked the other's).
From this revision a row belongs to the cluster whose operator wrote it
(``CRAFT_CLUSTER_ID``), the unique constraint is (cluster_id, namespace, name), and every
query of the store is limited to its own cluster id.

Rows written before this revision keep a NULL ``cluster_id`` and belong to no cluster:

* the operator's first ``ensure`` of a sandbox claims the NULL row of that namespace and
  name only if the row records that sandbox's uid and its token opens with this key ring
  for that uid (proof that this cluster's operator wrote it: an upgraded single-cluster
  install keeps its PATs, no re-mint); the finalizer claims and revokes such a row too;
* any other NULL row is left alone (not reused, not revoked, never swept); this cluster
  mints its own row beside it;
* ``craft-operator credentials adopt`` claims NULL rows whose CraftSandbox exists in this
  cluster with the row's uid, so that the orphan sweep can revoke them later.

Downgrade restores the (namespace, name) constraint; it fails while two clusters hold rows
of the same sandbox name.

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
        batch.drop_constraint("uq_craft_sandbox_credential_sandbox", type_="unique")
        # cluster_id first: the constraint's index also serves the sweep's per-cluster list.
        batch.create_unique_constraint(
            "uq_craft_sandbox_credential_cluster_sandbox", ["cluster_id", "namespace", "name"]
        )


def downgrade() -> None:
    with op.batch_alter_table("craft_sandbox_credential") as batch:
        batch.drop_constraint("uq_craft_sandbox_credential_cluster_sandbox", type_="unique")
        batch.create_unique_constraint("uq_craft_sandbox_credential_sandbox", ["namespace", "name"])
        batch.drop_column("cluster_id")

"""Credential rows whose CraftSandbox may be gone: list them, revoke them, adopt old ones.

The orphan sweep (:mod:`craft_operator.reconciler.orphan_sweep`) decides which rows are
orphans by asking the API server; this module only reads and writes the database. Every
query is limited to one cluster id, so an operator sharing Onyx's Postgres with another
cluster's operator never touches that cluster's rows. Rows without a cluster id (written
before the column existed) are only counted, until :func:`adopt_rows` claims them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, func, select, update

from craft_operator.credentials.db import WRITE_OPTION, translated_errors
from craft_operator.credentials.store import CredentialStore, revoke_pat_statement, utc_now
from craft_operator.credentials.tables import SandboxCredential

_CRED = cast(Table, SandboxCredential.__table__)


@dataclass(frozen=True)
class StoredCredential:
    """One credential row as the sweep sees it (never the token)."""

    row_id: int
    version: int
    namespace: str
    name: str
    sandbox_uid: str
    pat_id: int


def rows_of_cluster(
    store: CredentialStore, cluster_id: str, namespaces: Sequence[str] = ()
) -> list[StoredCredential]:
    """Every row of ``cluster_id`` (only in ``namespaces``, if given), oldest first."""
    query = (
        select(
            _CRED.c.id,
            _CRED.c.version,
            _CRED.c.namespace,
            _CRED.c.name,
            _CRED.c.sandbox_uid,
            _CRED.c.pat_id,
        )
        .where(_CRED.c.cluster_id == cluster_id)
        .order_by(_CRED.c.id)
    )
    if namespaces:
        query = query.where(_CRED.c.namespace.in_(list(namespaces)))
    with (
        translated_errors("listing the stored credentials"),
        store.engine.connect() as connection,
    ):
        return [
            StoredCredential(
                row_id=row.id,
                version=row.version,
                namespace=row.namespace,
                name=row.name,
                sandbox_uid=row.sandbox_uid,
                pat_id=row.pat_id,
            )
            for row in connection.execute(query)
        ]


def revoke_orphan(
    store: CredentialStore, row: StoredCredential, *, now: datetime | None = None
) -> bool:
    """Revoke the row's PAT and delete the row, if the row is still exactly ``row``.

    A row that changed since it was listed (a new sandbox of that name minted in the
    meantime: new uid, new version) is left alone and ``False`` returned. One transaction:
    the PAT is revoked only together with the row's deletion.
    """
    writer = store.engine.execution_options(**{WRITE_OPTION: True})
    with (
        translated_errors(f"revoking the orphaned PAT {row.pat_id}"),
        writer.begin() as connection,
    ):
        deleted = connection.execute(
            delete(_CRED).where(
                _CRED.c.id == row.row_id,
                _CRED.c.version == row.version,
                _CRED.c.sandbox_uid == row.sandbox_uid,
                _CRED.c.pat_id == row.pat_id,
            )
        )
        if deleted.rowcount != 1:
            return False
        connection.execute(revoke_pat_statement(row.pat_id, now or utc_now()))
    return True


def count_without_cluster(store: CredentialStore) -> int:
    """How many rows carry no cluster id (never swept until adopted)."""
    with (
        translated_errors("counting the stored credentials"),
        store.engine.connect() as connection,
    ):
        query = select(func.count()).select_from(_CRED).where(_CRED.c.cluster_id.is_(None))
        return int(connection.execute(query).scalar_one())


def adopt_rows(store: CredentialStore, cluster_id: str, namespaces: Sequence[str] = ()) -> int:
    """Give rows without a cluster id this ``cluster_id`` (only in ``namespaces``, if
    given); return how many. Only for rows this cluster's operator wrote: from then on
    the sweep may revoke them."""
    statement = update(_CRED).where(_CRED.c.cluster_id.is_(None)).values(cluster_id=cluster_id)
    if namespaces:
        statement = statement.where(_CRED.c.namespace.in_(list(namespaces)))
    writer = store.engine.execution_options(**{WRITE_OPTION: True})
    with translated_errors("adopting the stored credentials"), writer.begin() as connection:
        return int(connection.execute(statement).rowcount)

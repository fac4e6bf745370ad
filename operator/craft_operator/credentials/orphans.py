"""Credential rows whose CraftSandbox may be gone: list them, revoke them, adopt old ones.

The orphan sweep (:mod:`craft_operator.reconciler.orphan_sweep`) decides which rows are
orphans by asking the API server; this module only reads and writes the database. Every
query is limited to one cluster id (as are the store's own: rows are unique per cluster,
namespace and name), so an operator sharing Onyx's Postgres with another cluster's
operator never touches that cluster's rows. Rows without a cluster id (written before the
column existed) are only counted, until the store claims one on proof (see
:mod:`craft_operator.credentials.store`) or :func:`adopt_rows` claims those whose
CraftSandbox exists in this cluster with the row's uid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError

from craft_operator.credentials.backend import log
from craft_operator.credentials.db import WRITE_OPTION, is_unique_violation, translated_errors
from craft_operator.credentials.model import Revocation, utc_now
from craft_operator.credentials.revocation import (
    PatOwner,
    RowPat,
    owned_pats_query,
    revoke_pats_statement,
)
from craft_operator.credentials.store import CredentialStore
from craft_operator.credentials.tables import LibrarySyncRecord, SandboxCredential
from craft_operator.credentials.tokens import DEFAULT_TENANT, pat_name

_CRED = cast(Table, SandboxCredential.__table__)
_LIBRARY = cast(Table, LibrarySyncRecord.__table__)


@dataclass(frozen=True)
class StoredCredential:
    """One credential row as the sweep sees it (never the token)."""

    row_id: int
    version: int
    namespace: str
    name: str
    sandbox_uid: str
    pat_id: int
    #: The PAT its PAT renewed, if one may still be in its grace period.
    superseded_pat_id: int | None = None
    #: The sandbox's tenant: in multi-tenant Onyx, its PATs are in the schema it names.
    tenant_id: str = DEFAULT_TENANT


def rows_of_cluster(
    store: CredentialStore, cluster_id: str | None, namespaces: Sequence[str] = ()
) -> list[StoredCredential]:
    """Every row of ``cluster_id`` (``None``: rows without one; only in ``namespaces``, if
    given), oldest first."""
    query = (
        select(
            _CRED.c.id,
            _CRED.c.version,
            _CRED.c.namespace,
            _CRED.c.name,
            _CRED.c.sandbox_uid,
            _CRED.c.pat_id,
            _CRED.c.superseded_pat_id,
            _CRED.c.tenant_id,
        )
        .where(
            _CRED.c.cluster_id.is_(None) if cluster_id is None else _CRED.c.cluster_id == cluster_id
        )
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
                superseded_pat_id=row.superseded_pat_id,
                tenant_id=row.tenant_id,
            )
            for row in connection.execute(query)
        ]


def revoke_orphan(
    store: CredentialStore, row: StoredCredential, *, now: datetime | None = None
) -> Revocation | None:
    """Revoke the row's PAT (and the one still in its grace period, if any) and delete the
    row and the sandbox's library record, if the row is still exactly ``row``; what was
    done to its PATs: :attr:`Revocation.REVOKED`, :attr:`Revocation.NOT_IN_ONYX` (none of
    them was in Onyx: the row only forgotten) or :attr:`Revocation.NOTHING` (its tenant's
    schema is gone, its PATs with it).

    A row that changed since it was listed (a new sandbox of that name minted in the
    meantime: new uid, new version) is left alone and ``None`` returned. One transaction:
    the PATs are revoked only together with the row's deletion. In multi-tenant Onyx the
    PATs are revoked in the schema of the row's tenant. Only the row's own are: Craft PATs
    of its user named after its sandbox, the current one created with the row (see
    :func:`~.revocation.revoke_pats_statement`).
    """
    writer = store.engine.execution_options(**{WRITE_OPTION: True})
    with (
        translated_errors(f"revoking the orphaned PAT {row.pat_id}"),
        writer.begin() as connection,
    ):
        deleted = connection.execute(
            delete(_CRED)
            .where(
                _CRED.c.id == row.row_id,
                _CRED.c.version == row.version,
                _CRED.c.sandbox_uid == row.sandbox_uid,
                _CRED.c.pat_id == row.pat_id,
            )
            .returning(_CRED.c.user_id, _CRED.c.created_at)
        ).one_or_none()
        if deleted is None:
            return None
        # The row's current PAT is the one of its id created with it (ids alone may name
        # another sandbox's, once its tenant's schema was recreated or restored).
        pats = [RowPat(row.pat_id, deleted.created_at)]
        if row.superseded_pat_id is not None:
            pats.append(RowPat(row.superseded_pat_id))
        tables = store.revocable(connection, row.tenant_id)
        done = Revocation.NOTHING
        if tables is None:
            log.warning(
                "orphan sweep: forgot the credential of %s/%s: its Onyx tenant %r's schema is "
                "gone, and PAT %s with it",
                row.namespace,
                row.name,
                row.tenant_id,
                row.pat_id,
            )
        else:
            owner = PatOwner(deleted.user_id, pat_name(row.namespace, row.name))
            present = connection.execute(owned_pats_query(pats, tables.pat, owner=owner))
            done = Revocation.REVOKED if present.first() else Revocation.NOT_IN_ONYX
            statement = revoke_pats_statement(pats, now or utc_now(), tables.pat, owner=owner)
            connection.execute(statement)
        connection.execute(delete(_LIBRARY).where(_LIBRARY.c.sandbox_uid == row.sandbox_uid))
    return done


def count_without_cluster(store: CredentialStore) -> int:
    """How many rows carry no cluster id (never swept until adopted)."""
    with (
        translated_errors("counting the stored credentials"),
        store.engine.connect() as connection,
    ):
        query = select(func.count()).select_from(_CRED).where(_CRED.c.cluster_id.is_(None))
        return int(connection.execute(query).scalar_one())


def unclaimed_rows(
    store: CredentialStore, namespaces: Sequence[str] = ()
) -> list[StoredCredential]:
    """The rows without a cluster id (only in ``namespaces``, if given), oldest first."""
    return rows_of_cluster(store, None, namespaces)


def adopt_rows(
    store: CredentialStore,
    rows: Sequence[StoredCredential],
    sandbox_uids: Mapping[tuple[str, str], str],
    *,
    dry_run: bool = False,
) -> list[StoredCredential]:
    """Claim for ``store.cluster_id`` those of ``rows`` (rows without a cluster id) whose
    CraftSandbox exists in this cluster with the row's uid; return them.

    ``sandbox_uids`` maps (namespace, name) to the uid of this cluster's CraftSandbox of
    that name, for those that exist. Sandbox uids are unique across clusters, so a match
    proves the row was written for this cluster's sandbox; any other row (another
    cluster's, or an orphan no cluster can prove its own) is left alone, since once
    adopted the orphan sweep may revoke its PAT. A row that changed since it was listed,
    or whose name this cluster already has a row of (or gets one while it is claimed), is
    not claimed. ``dry_run`` claims
    nothing and returns the rows that prove this cluster's.
    """
    provable = [
        row for row in rows if sandbox_uids.get((row.namespace, row.name)) == row.sandbox_uid
    ]
    if dry_run or not provable:
        return provable
    claimed: list[StoredCredential] = []
    ours = _CRED.alias("ours")  # this cluster's own row of that name, if it has one
    writer = store.engine.execution_options(**{WRITE_OPTION: True})
    with translated_errors("adopting the stored credentials"), writer.begin() as connection:
        for row in provable:
            try:
                with connection.begin_nested():  # a lost race undoes this row's claim only
                    result = connection.execute(
                        update(_CRED)
                        .where(
                            _CRED.c.id == row.row_id,
                            _CRED.c.version == row.version,
                            _CRED.c.sandbox_uid == row.sandbox_uid,
                            _CRED.c.cluster_id.is_(None),
                            ~exists().where(
                                ours.c.cluster_id == store.cluster_id,
                                ours.c.namespace == row.namespace,
                                ours.c.name == row.name,
                            ),
                        )
                        .values(cluster_id=store.cluster_id, version=row.version + 1)
                    )
            except IntegrityError as exc:
                if not is_unique_violation(exc):
                    raise
                # This cluster's operator wrote its own row of that name since the check
                # (it made the sandbox a PAT of its own meanwhile): the row is left, as
                # one whose name this cluster already had; the others are still adopted.
                continue
            if result.rowcount == 1:
                claimed.append(row)
    return claimed

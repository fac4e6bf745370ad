"""What the credential store's operations share: the engine as a reader and a writer, the
key ring, the clock, the cluster id, and the query that reads a sandbox's row.

Every read and write of the store's modules (ensuring, minting, claiming, revocation,
rotation) goes through one :class:`StoreBackend`, so every one is limited to its cluster's
rows, and finds Onyx's tables where the sandbox's tenant has them (:meth:`StoreBackend.tables`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    Engine,
    FromClause,
    Row,
    Select,
    Table,
    bindparam,
    inspect,
    literal,
    null,
    select,
)
from sqlalchemy.engine import Connection

from craft_operator.credentials.db import (
    WRITE_OPTION,
    check_multi_tenant,
    check_onyx_tables,
    is_onyx_mode,
)
from craft_operator.credentials.errors import CredentialsError, SchemaMissingError, TenantGoneError
from craft_operator.credentials.keyring import KeyRing
from craft_operator.credentials.tables import LibrarySyncRecord, SandboxCredential
from craft_operator.credentials.tenants import (
    DEFAULT_TABLES,
    OnyxTables,
    check_tenant_id,
    tenant_tables,
)
from craft_operator.credentials.tokens import PAT_NAME_PREFIX, PatType

#: The store's modules all log under the store's name (as before they were split out).
log = logging.getLogger("craft_operator.credentials.store")

CRED = cast(Table, SandboxCredential.__table__)
#: Onyx's tables in the default schema (single-tenant Onyx).
PAT = DEFAULT_TABLES.pat
USER = DEFAULT_TABLES.user
LIBRARY = cast(Table, LibrarySyncRecord.__table__)
#: Tenants whose schema a store remembers having checked; it checks again past that.
_CHECKED_TENANTS = 4096
#: Reads of a row whose tenant changed between them before giving up.
_TENANT_READS = 3


def current_row_query(
    *,
    onyx_mode: bool,
    lock: bool,
    pats: OnyxTables | None = DEFAULT_TABLES,
    users: OnyxTables | None = DEFAULT_TABLES,
) -> Select[Any]:
    """A sandbox's row joined to its PAT, to the PAT in its grace period (if any) and, on
    Onyx, to the user named ``user_id``, selected by ``cluster_id``, ``namespace`` and
    ``name``; ``lock`` locks the row. The PATs are those of ``pats``, the user that of
    ``users`` (a tenant's schema each, in multi-tenant Onyx; ``None``: a tenant whose
    schema is gone, read as no PAT and no user); the row is the operator's own table, in
    the default schema."""
    columns: list[Any] = [
        CRED.c.id,
        CRED.c.version,
        CRED.c.namespace,
        CRED.c.name,
        CRED.c.sandbox_uid,
        CRED.c.user_id,
        CRED.c.tenant_id,
        CRED.c.pat_id,
        CRED.c.token_display,
        CRED.c.encrypted_token,
        CRED.c.key_id,
        CRED.c.created_at,
        CRED.c.expires_at,
        CRED.c.superseded_pat_id,
        CRED.c.sandbox_created_at,
    ]
    joined: Any = CRED
    if pats is None:
        labels = ("pat_hash", "pat_revoked", "pat_expires_at", "grace_revoked", "grace_expires_at")
        columns.extend(null().label(label) for label in labels)
    else:
        pat = pats.pat
        grace_pat = pat.alias("grace_pat")  # the superseded PAT still in its grace period
        columns.extend(
            [
                pat.c.hashed_token.label("pat_hash"),
                pat.c.is_revoked.label("pat_revoked"),
                pat.c.expires_at.label("pat_expires_at"),
                grace_pat.c.is_revoked.label("grace_revoked"),
                grace_pat.c.expires_at.label("grace_expires_at"),
            ]
        )
        joined = joined.outerjoin(pat, _is_the_rows(pat, CRED.c.pat_id, current=True)).outerjoin(
            grace_pat, _is_the_rows(grace_pat, CRED.c.superseded_pat_id, current=False)
        )
    if onyx_mode and users is None:
        columns.append(null().label("user_active"))
    elif onyx_mode and users is not None:
        user = users.user
        columns.append(user.c.is_active.label("user_active"))
        joined = joined.outerjoin(user, user.c.id == bindparam("user_id", type_=user.c.id.type))
    query = (
        select(*columns)
        .select_from(joined)
        .where(
            CRED.c.cluster_id == bindparam("cluster_id"),
            CRED.c.namespace == bindparam("namespace"),
            CRED.c.name == bindparam("name"),
        )
    )
    return query.with_for_update(of=CRED) if lock else query


#: The name the mint gives a row's PATs (:func:`~.tokens.pat_name` of the row's sandbox).
_ROW_PAT_NAME = literal(PAT_NAME_PREFIX) + CRED.c.namespace + literal("/") + CRED.c.name


def craft_pat_of(
    pat: FromClause, *, pat_id: Any, user_id: Any, name: Any, created_at: Any = None
) -> Any:
    """Whether a PAT of the table ``pat`` is the one a credential row names: of that id, a
    Craft PAT of the row's user, named after the row's sandbox and, when ``created_at`` is
    given (the row's current PAT: the mint writes both at once), created then. Each may be
    a value or a column of the row. Ids alone restart when a tenant's schema is recreated
    or restored while the operator's own table is not: another sandbox's PAT under that id
    is never the row's, and never acted on (the superseded PAT's creation is not recorded:
    its name ties it)."""
    condition = (
        (pat.c.id == pat_id)
        & (pat.c.user_id == user_id)
        & (pat.c.pat_type == PatType.CRAFT)
        & (pat.c.name == name)
    )
    return condition if created_at is None else condition & (pat.c.created_at == created_at)


def _is_the_rows(pat: FromClause, pat_id: Any, *, current: bool) -> Any:
    """Whether a PAT of the table ``pat`` is the one a row names by the column ``pat_id``
    (:func:`craft_pat_of`, in a join)."""
    return craft_pat_of(
        pat,
        pat_id=pat_id,
        user_id=CRED.c.user_id,
        name=_ROW_PAT_NAME,
        created_at=CRED.c.created_at if current else None,
    )


def _gone_for_good(connection: Connection, gone: TenantGoneError) -> None:
    """Return if a tenant without a schema here took its PATs with it (the default schema
    has none of Onyx's tables either); else raise ``gone``, said with the way out (its
    PATs may be in the default schema, and an id alone cannot tell which is the row's)."""
    try:
        check_onyx_tables(connection)
    except SchemaMissingError:
        return
    raise TenantGoneError(
        f"{gone}, but the default schema has Onyx's tables: its PATs may be there (minted "
        "before CRAFT_ONYX_MULTI_TENANT was on); revoke it with the setting off "
        "(craft-operator credentials revoke)"
    ) from None


@lru_cache(maxsize=1024)
def _tenant_row_query(
    pat_tenant: str | None, user_tenant: str | None, *, lock: bool
) -> Select[Any]:
    """:func:`current_row_query` in multi-tenant Onyx: the row's PATs in the schema of
    ``pat_tenant`` (the row's tenant), the user in that of ``user_tenant`` (``None``: a
    tenant whose schema is gone)."""
    return current_row_query(
        onyx_mode=True,
        lock=lock,
        pats=None if pat_tenant is None else tenant_tables(pat_tenant),
        users=None if user_tenant is None else tenant_tables(user_tenant),
    )


@dataclass(frozen=True)
class StoreBackend:
    """The database, key ring, clock and cluster id of one credential store."""

    engine: Engine
    keyring: KeyRing
    clock: Callable[[], datetime]
    #: The only rows the store reads or writes; written on every row it mints.
    cluster_id: str
    #: True on Onyx's Postgres, False on the embedded SQLite database.
    onyx_mode: bool
    #: Connections for reads, which need no transaction.
    reader: Engine
    #: Connections for write transactions (on SQLite they take the write lock at BEGIN).
    writer: Engine
    read_current: Select[Any]
    lock_current: Select[Any]
    #: Multi-tenant Onyx: Onyx's tables are in a schema per tenant, named by its id.
    multi_tenant: bool = False
    #: The tenants whose schema was found to hold Onyx's tables.
    _checked: set[str] = field(default_factory=set, repr=False, compare=False)
    _checked_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def open(
        cls,
        engine: Engine,
        keyring: KeyRing,
        *,
        clock: Callable[[], datetime],
        cluster_id: str,
        multi_tenant: bool = False,
    ) -> StoreBackend:
        """The backend of a store on ``engine``."""
        check_multi_tenant(engine, multi_tenant)
        onyx_mode = is_onyx_mode(engine)
        return cls(
            engine=engine,
            keyring=keyring,
            clock=clock,
            cluster_id=cluster_id,
            onyx_mode=onyx_mode,
            # Reads run in a transaction too: on Postgres its first statement bounds how long
            # they wait for a lock (an Onyx migration's on "user") or run (db.py).
            reader=engine,
            writer=engine.execution_options(**{WRITE_OPTION: True}),
            read_current=current_row_query(onyx_mode=onyx_mode, lock=False),
            lock_current=current_row_query(onyx_mode=onyx_mode, lock=True),
            multi_tenant=multi_tenant,
        )

    def tables(self, connection: Connection, tenant_id: str, *, fresh: bool = False) -> OnyxTables:
        """Onyx's tables for ``tenant_id``: those of the default schema, or in multi-tenant
        Onyx those of the tenant's schema, checked (on ``connection``) the first time, or
        every time when ``fresh`` (before revoking: the tenant may be gone since).

        Raises :class:`CredentialsError` for a tenant id that cannot name a schema,
        :class:`TenantGoneError` when its schema no longer exists, and
        :class:`SchemaMissingError` naming the schema when it lacks Onyx's tables.
        """
        if not self.multi_tenant:
            return DEFAULT_TABLES
        # Checked before its tables are made and kept (a few dozen KB each): a spec may
        # name any tenant, and one without a schema must leave nothing behind.
        check_tenant_id(tenant_id)
        if fresh or tenant_id not in self._checked:
            try:
                check_onyx_tables(connection, tenant_schema=tenant_id)
            except SchemaMissingError:
                with self._checked_lock:
                    self._checked.discard(tenant_id)
                if tenant_id not in inspect(connection).get_schema_names():
                    raise TenantGoneError(
                        f"the database in CRAFT_DATABASE_URL has no schema {tenant_id!r} of "
                        f"Onyx tenant {tenant_id!r} (deleted, or never on this database?): "
                        "no PAT of it is there"
                    ) from None
                raise
            with self._checked_lock:
                if len(self._checked) >= _CHECKED_TENANTS:
                    self._checked.clear()
                self._checked.add(tenant_id)
        return tenant_tables(tenant_id)

    def revocable(self, connection: Connection, tenant_id: str) -> OnyxTables | None:
        """Where the PATs of a row of ``tenant_id`` are to be revoked: its tenant's tables
        (checked afresh), or ``None`` when the tenant has no schema here and the default
        schema has none of Onyx's tables either (a tenant Onyx deleted: its PATs went with
        its schema). Raises :class:`TenantGoneError` when the tenant has no schema but the
        default schema has Onyx's tables: its PATs may be there (minted before
        multi-tenant mode), and an id alone cannot tell which is the row's."""
        try:
            return self.tables(connection, tenant_id, fresh=True)
        except TenantGoneError as exc:
            _gone_for_good(connection, exc)
            return None

    def _present(self, connection: Connection, tenant_id: str, *, fresh: bool) -> bool:
        """Whether the tenant's schema has Onyx's tables (checked as :meth:`tables` does);
        False for a tenant Onyx deleted, :class:`TenantGoneError` when its PATs may be in
        the default schema (see :meth:`revocable`)."""
        try:
            self.tables(connection, tenant_id, fresh=fresh)
        except TenantGoneError as exc:
            _gone_for_good(connection, exc)
            return False
        return True

    def fetch(
        self,
        connection: Connection,
        namespace: str,
        name: str,
        *,
        lock: bool = False,
        tenant_id: str | None = None,
        user_id: uuid.UUID | None = None,
        fresh: bool = False,
    ) -> Row[Any] | None:
        """This cluster's row for ``namespace``/``name`` joined to its PATs and, on Onyx, to
        the user ``user_id`` (see :func:`current_row_query`), or None; ``lock`` locks it.

        Multi-tenant: the PATs are read in the schema of the row's tenant and the user in
        that of ``tenant_id`` (the sandbox's, which must exist; default: the row's). The
        row's tenant is guessed to be ``tenant_id``, else read first, and the row read again
        if it is not. A row whose tenant's schema is gone reads as without PATs (they went
        with it); ``fresh`` checks the schemas again (see :meth:`tables`).
        """
        if not self.multi_tenant:
            query = self.lock_current if lock else self.read_current
            return self._fetch(connection, query, namespace, name, user_id)
        pat_tenant = tenant_id
        if pat_tenant is None:
            pat_tenant = self._tenant_of(connection, namespace, name, lock=lock)
        for _attempt in range(_TENANT_READS):
            if pat_tenant is None:
                return None
            if tenant_id is not None:
                self.tables(connection, tenant_id, fresh=fresh)
            present = self._present(connection, pat_tenant, fresh=fresh)
            user_tenant = tenant_id if tenant_id is not None else pat_tenant if present else None
            query = _tenant_row_query(pat_tenant if present else None, user_tenant, lock=lock)
            row = self._fetch(connection, query, namespace, name, user_id)
            if row is None or row.tenant_id == pat_tenant:
                return row
            pat_tenant = row.tenant_id
        raise CredentialsError(
            f"reading the credential of sandbox {namespace}/{name}: its tenant kept changing"
        )

    def _tenant_of(
        self, connection: Connection, namespace: str, name: str, *, lock: bool
    ) -> str | None:
        """The tenant of this cluster's row for ``namespace``/``name``, if there is one."""
        query = select(CRED.c.tenant_id).where(
            CRED.c.cluster_id == self.cluster_id,
            CRED.c.namespace == namespace,
            CRED.c.name == name,
        )
        tenant: str | None = connection.execute(
            query.with_for_update() if lock else query
        ).scalar_one_or_none()
        return tenant

    def _fetch(
        self,
        connection: Connection,
        query: Select[Any],
        namespace: str,
        name: str,
        user_id: uuid.UUID | None = None,
    ) -> Row[Any] | None:
        """This cluster's row for ``namespace``/``name`` as ``query`` selects it, or None."""
        params: dict[str, Any] = {
            "cluster_id": self.cluster_id,
            "namespace": namespace,
            "name": name,
        }
        if self.onyx_mode:
            params["user_id"] = user_id
        return connection.execute(query, params).one_or_none()

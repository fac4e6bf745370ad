"""What the credential store's operations share: the engine as a reader and a writer, the
key ring, the clock, the cluster id, and the query that reads a sandbox's row.

Every read and write of the store's modules (ensuring, minting, claiming, revocation,
rotation) goes through one :class:`StoreBackend`, so every one is limited to its cluster's
rows.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Engine, Row, Select, Table, bindparam, select
from sqlalchemy.engine import Connection

from craft_operator.credentials.db import WRITE_OPTION, is_onyx_mode
from craft_operator.credentials.keyring import KeyRing
from craft_operator.credentials.tables import (
    LibrarySyncRecord,
    OnyxUser,
    PersonalAccessToken,
    SandboxCredential,
)

#: The store's modules all log under the store's name (as before they were split out).
log = logging.getLogger("craft_operator.credentials.store")

CRED = cast(Table, SandboxCredential.__table__)
PAT = cast(Table, PersonalAccessToken.__table__)
USER = cast(Table, OnyxUser.__table__)
LIBRARY = cast(Table, LibrarySyncRecord.__table__)
#: The superseded PAT still in its grace period, joined to a sandbox's row.
GRACE_PAT = PAT.alias("grace_pat")


def current_row_query(*, onyx_mode: bool, lock: bool) -> Select[Any]:
    """A sandbox's row joined to its PAT, to the PAT in its grace period (if any) and, on
    Onyx, to the user named ``user_id``, selected by ``cluster_id``, ``namespace`` and
    ``name``; ``lock`` locks the row."""
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
        PAT.c.hashed_token.label("pat_hash"),
        PAT.c.is_revoked.label("pat_revoked"),
        PAT.c.expires_at.label("pat_expires_at"),
        CRED.c.superseded_pat_id,
        GRACE_PAT.c.is_revoked.label("grace_revoked"),
        GRACE_PAT.c.expires_at.label("grace_expires_at"),
    ]
    joined = CRED.outerjoin(PAT, PAT.c.id == CRED.c.pat_id).outerjoin(
        GRACE_PAT, GRACE_PAT.c.id == CRED.c.superseded_pat_id
    )
    if onyx_mode:
        columns.append(USER.c.is_active.label("user_active"))
        joined = joined.outerjoin(USER, USER.c.id == bindparam("user_id", type_=USER.c.id.type))
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

    @classmethod
    def open(
        cls,
        engine: Engine,
        keyring: KeyRing,
        *,
        clock: Callable[[], datetime],
        cluster_id: str,
    ) -> StoreBackend:
        """The backend of a store on ``engine``."""
        onyx_mode = is_onyx_mode(engine)
        return cls(
            engine=engine,
            keyring=keyring,
            clock=clock,
            cluster_id=cluster_id,
            onyx_mode=onyx_mode,
            # Reads need no transaction: on Postgres they run in autocommit (one round trip).
            reader=(
                engine.execution_options(isolation_level="AUTOCOMMIT") if onyx_mode else engine
            ),
            writer=engine.execution_options(**{WRITE_OPTION: True}),
            read_current=current_row_query(onyx_mode=onyx_mode, lock=False),
            lock_current=current_row_query(onyx_mode=onyx_mode, lock=True),
        )

    def fetch(
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

"""Minting a sandbox's new PAT in one write transaction, retiring the one it supersedes.

Lock the row and check it is the version the decision was made on, insert the new PAT,
deal with the superseded one and point the row at the new PAT (one statement on Postgres),
so the switch is atomic. A row that changed since it was read raises
:class:`LostRaceError`, and the transaction (the new PAT with it) rolls back.

The superseded PAT is revoked at once, except after a renewal (a reason in
:data:`~craft_operator.credentials.renewal.GRACEFUL`): then it stays live for the grace
period, its ``expires_at`` shortened to the end of it, and the row records it as
``superseded_pat_id`` until :mod:`.retiring` revokes it (the pod uses the new one) or it
expires. A PAT still in its grace period from an earlier renewal is revoked at once by any
mint: a row keeps one at most.

In multi-tenant Onyx the new PAT goes into the schema of the sandbox's tenant, and the
superseded ones are those of the row's tenant's schema (the same tenant, but for a row left
by an earlier sandbox of that name).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import SecretStr
from sqlalchemy import Row, Table, and_, bindparam, delete, insert, literal, select, update
from sqlalchemy.engine import Connection

from craft_operator.credentials.backend import CRED, LIBRARY, StoreBackend, log
from craft_operator.credentials.errors import UserInactiveError, UserNotFoundError
from craft_operator.credentials.keyring import parse_header, seal_token
from craft_operator.credentials.model import IssuedCredential, SandboxIdentity
from craft_operator.credentials.renewal import GRACEFUL, EnsurePolicy
from craft_operator.credentials.revocation import (
    RowPat,
    grace_statement,
    joined_grace_pat,
    owner_of,
    revoke_pats_statement,
)
from craft_operator.credentials.tenants import OnyxTables
from craft_operator.credentials.tokens import (
    CRAFT_SCOPES,
    PatType,
    display_form,
    generate_token,
    hash_token,
    pat_name,
)

_LOCK_VERSION = select(CRED.c.version).where(CRED.c.id == bindparam("row_id")).with_for_update()


class LostRaceError(Exception):
    """Another writer changed the row between our read and our write; try again."""


def mint(
    backend: StoreBackend, policy: EnsurePolicy, row: Row[Any] | None, reason: str
) -> IssuedCredential:
    """Replace the credential read as ``row`` (None: there was none) with a new PAT.

    Raises :class:`LostRaceError` (or a unique violation) when another writer changed
    the credential since ``row`` was read; the caller reads again and decides again.
    """
    identity = policy.identity
    with backend.writer.begin() as connection:
        if row is not None:
            _check_version(connection, row)
        tables = backend.tables(connection, policy.tenant_id)
        now = backend.clock()
        token = generate_token(policy.tenant_id)
        expires_at = now + policy.lifetime
        # Only a PAT that still exists can be superseded (and revoked, or left in grace).
        superseded = None if row is None or row.pat_hash is None else row.pat_id
        grace = _grace(policy, row, superseded, reason, now)
        superseded_in: OnyxTables | None = tables
        if row is not None and row.tenant_id != policy.tenant_id:
            # None: the earlier tenant's schema is gone, and its PATs with it.
            superseded_in = backend.revocable(connection, row.tenant_id)
        retiring = (
            []
            if superseded_in is None
            else _retiring(row, superseded, grace, now, superseded_in.pat)
        )
        pat_id = insert_pat(
            backend,
            connection,
            identity,
            policy.user_id,
            token,
            now,
            expires_at,
            retiring,
            tables=tables,
        )
        sealed = seal_token(backend.keyring, token, sandbox_uid=identity.uid)
        values: dict[str, Any] = {
            "sandbox_uid": identity.uid,
            "user_id": policy.user_id,
            "tenant_id": policy.tenant_id,
            "pat_id": pat_id,
            "token_display": display_form(token),
            "encrypted_token": sealed,
            # The envelope's own key id: the ring may be re-read between the two.
            "key_id": parse_header(sealed, subject=str(identity))[0],
            "created_at": now,
            "expires_at": expires_at,
            "updated_at": now,
            "cluster_id": backend.cluster_id,
            "superseded_pat_id": None if grace is None else superseded,
        }
        if identity.created_at is not None:
            values["sandbox_created_at"] = identity.created_at
        elif row is not None and row.sandbox_uid != identity.uid:
            values["sandbox_created_at"] = None  # the earlier sandbox's is not this one's
        _write_row(connection, identity, row, values)
    log.info(
        "%s: minted PAT %s (%s), expires %s%s",
        identity,
        pat_id,
        reason,
        expires_at.isoformat(),
        _retired_text(superseded, grace),
    )
    return IssuedCredential(
        token=token,
        pat_id=pat_id,
        token_display=display_form(token),
        created_at=now,
        expires_at=expires_at,
        minted=True,
        superseded_pat_id=superseded,
        reason=reason,
        grace_pat_id=None if grace is None else superseded,
        grace_expires_at=grace,
    )


def _grace(
    policy: EnsurePolicy,
    row: Row[Any] | None,
    superseded: int | None,
    reason: str,
    now: datetime,
) -> datetime | None:
    """When the superseded PAT stops being live if it is left in its grace period (a
    renewal), or None when it is revoked at once (or there is none)."""
    if row is None or superseded is None or reason not in GRACEFUL:
        return None
    until: datetime = now + policy.grace
    expires_at: datetime | None = row.pat_expires_at
    return until if expires_at is None else min(expires_at, until)


def _retiring(
    row: Row[Any] | None,
    superseded: int | None,
    grace: datetime | None,
    now: datetime,
    pat: Table,
) -> list[Any]:
    """The statements on the PATs the mint supersedes (in the table ``pat``): the one it
    replaces revoked or left in its grace period, and an earlier one still in its grace
    period revoked."""
    if row is None:
        return []
    owner = owner_of(row)
    # Only a grace PAT the row's join found its own (another's may have its recorded id).
    grace_pat = joined_grace_pat(row)
    revoked = [] if grace_pat is None else [grace_pat]
    statements: list[Any] = []
    if superseded is not None:
        current = RowPat(superseded, row.created_at)
        if grace is not None:
            statements.append(grace_statement(current, grace, now, pat, owner=owner))
        else:
            revoked.append(current)
    if revoked:
        statements.append(revoke_pats_statement(revoked, now, pat, owner=owner))
    return statements


def _retired_text(superseded: int | None, grace: datetime | None) -> str:
    if superseded is None:
        return ""
    if grace is None:
        return f"; revoked PAT {superseded}"
    return f"; PAT {superseded} stays live until {grace.isoformat()} at the latest"


def _check_version(connection: Connection, row: Row[Any]) -> None:
    """Lock the row and check it is still the one we decided on.

    (Re-reading the joined PAT under the lock would not do: in READ COMMITTED the lock
    returns the row's newest version but joins it to rows of the statement's snapshot.)
    """
    locked = connection.execute(_LOCK_VERSION, {"row_id": row.id}).scalar_one_or_none()
    if locked != row.version:
        raise LostRaceError


def _write_row(
    connection: Connection,
    identity: SandboxIdentity,
    row: Row[Any] | None,
    values: dict[str, Any],
) -> None:
    """Insert the sandbox's row, or update the one read as ``row`` if it is unchanged."""
    if row is None:
        connection.execute(
            insert(CRED).values(
                namespace=identity.namespace, name=identity.name, version=1, **values
            )
        )
        return
    result = connection.execute(
        update(CRED)
        .where(CRED.c.id == row.id, CRED.c.version == row.version)
        .values(version=row.version + 1, **values)
    )
    if result.rowcount != 1:
        raise LostRaceError
    if row.sandbox_uid != identity.uid:
        # An earlier sandbox of this name went without its finalizer: its library record
        # goes with its row, which no sweep finds any more.
        connection.execute(delete(LIBRARY).where(LIBRARY.c.sandbox_uid == row.sandbox_uid))


def insert_pat(
    backend: StoreBackend,
    connection: Connection,
    identity: SandboxIdentity,
    user_id: uuid.UUID,
    token: SecretStr,
    now: datetime,
    expires_at: datetime,
    retiring: Sequence[Any] = (),
    *,
    tables: OnyxTables,
) -> int:
    """Insert the new PAT into ``tables`` (checking the user there), running the
    ``retiring`` statements on the PATs it supersedes (see :func:`_retiring`); returns its
    id."""
    values: dict[str, Any] = {
        "name": pat_name(identity.namespace, identity.name),
        "hashed_token": hash_token(token),
        "token_display": display_form(token),
        "user_id": user_id,
        "expires_at": expires_at,
        "created_at": now,
        "is_revoked": False,
        "pat_type": PatType.CRAFT,
        "scopes": list(CRAFT_SCOPES),
    }
    if not backend.onyx_mode:
        for statement in retiring:
            connection.execute(statement)
        pat = tables.pat
        result = connection.execute(insert(pat).values(**values).returning(pat.c.id))
        return int(result.scalar_one())
    return _insert_pat_for_active_user(connection, identity, values, retiring, tables)


def _insert_pat_for_active_user(
    connection: Connection,
    identity: SandboxIdentity,
    values: dict[str, Any],
    retiring: Sequence[Any],
    tables: OnyxTables,
) -> int:
    """One statement on Postgres: revoke the superseded PATs or leave one in its grace
    period (data-modifying CTEs) and insert the new one only if the user exists and is
    active."""
    user_id = values["user_id"]
    pat, user = tables
    source = select(*(literal(value, pat.c[key].type) for key, value in values.items())).where(
        and_(user.c.id == user_id, user.c.is_active.is_(True))
    )
    statement = insert(pat).from_select(list(values), source).returning(pat.c.id)
    for number, retire in enumerate(retiring):
        # Each statement's own table: the superseded PATs may be in another tenant's schema.
        statement = statement.add_cte(
            retire.returning(retire.table.c.id).cte(f"superseded_{number}")
        )
    pat_id = connection.execute(statement).scalar_one_or_none()
    if pat_id is None:
        active = connection.execute(
            select(user.c.is_active).where(user.c.id == user_id)
        ).scalar_one_or_none()
        if active is None:
            raise UserNotFoundError(f"{identity}: user {user_id} does not exist in Onyx")
        raise UserInactiveError(f"{identity}: user {user_id} is inactive in Onyx")
    return int(pat_id)

"""Revoking a sandbox's PATs the way Onyx does, and forgetting its stored token."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Select, Table, case, delete, false, literal, or_, select, update

from craft_operator.api.times import utc
from craft_operator.credentials.backend import CRED, LIBRARY, PAT, StoreBackend, craft_pat_of, log
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.model import CredentialInfo, Forgotten, credential_info
from craft_operator.credentials.tokens import pat_name


def _no_later_than(moment: datetime, pat: Table) -> Any:
    """``expires_at`` brought forward to ``moment`` if it is later (or never), never pushed
    back."""
    bound = literal(moment, pat.c.expires_at.type)
    return case(
        (pat.c.expires_at.is_(None) | (pat.c.expires_at > bound), bound),
        else_=pat.c.expires_at,
    )


def _live(now: datetime, pat: Table) -> Any:
    """Whether a PAT authenticates at ``now`` as Onyx's server decides: by ``expires_at``
    alone (it never reads ``is_revoked``, which its own revocation sets with the expiry)."""
    bound = literal(now, pat.c.expires_at.type)
    return pat.c.expires_at.is_(None) | (pat.c.expires_at > bound)


#: How far before its own clock the operator dates a revocation. Onyx's server judges a
#: PAT by ``expires_at`` against its own clock alone: an expiry of the operator's "now"
#: would leave a revoked PAT authenticating for as long as the operator's clock runs ahead
#: of the server's.
REVOCATION_SKEW = timedelta(minutes=5)


class RowPat(NamedTuple):
    """A PAT a credential row names: its id and, for the row's current PAT, when it was
    created (the mint writes the row's ``created_at`` on it); ``None`` for the PAT in its
    grace period, whose creation the row does not record."""

    pat_id: int
    created_at: datetime | None = None


class PatOwner(NamedTuple):
    """Whose PATs a credential row's are: Craft PATs of its user, named after its sandbox
    (:func:`~.tokens.pat_name`)."""

    user_id: uuid.UUID
    name: str


def owner_of(row: Any) -> PatOwner:
    """The owner of the PATs of credential ``row`` (its user, namespace and name)."""
    return PatOwner(row.user_id, pat_name(row.namespace, row.name))


def joined_pats(row: Any) -> list[RowPat]:
    """The PATs of credential ``row`` (joined to them, see
    :func:`~.backend.current_row_query`) that the join found to be the row's: its current
    PAT, then the one in its grace period. Another's PAT under a recorded id (ids restart
    when a tenant's schema is recreated or restored) is not among them."""
    pats = [] if row.pat_hash is None else [RowPat(row.pat_id, row.created_at)]
    grace = joined_grace_pat(row)
    return pats if grace is None else [*pats, grace]


def joined_grace_pat(row: Any) -> RowPat | None:
    """The PAT in its grace period of credential ``row`` (joined to it), if the join found
    it the row's (see :func:`joined_pats`)."""
    if row.superseded_pat_id is None or row.grace_revoked is None:
        return None
    return RowPat(row.superseded_pat_id)


def _owned(pats: Sequence[RowPat], owner: PatOwner, pat: Table) -> Any:
    """Whether a PAT is one of ``pats`` and a Craft PAT of ``owner`` (:func:`craft_pat_of`):
    the operator acts on no other, whatever the id it looked up names."""
    return or_(
        false(),
        *(
            craft_pat_of(
                pat,
                pat_id=one.pat_id,
                user_id=owner.user_id,
                name=owner.name,
                created_at=one.created_at,
            )
            for one in pats
        ),
    )


def revoke_pats_statement(
    pats: Sequence[RowPat], now: datetime, pat: Table = PAT, *, owner: PatOwner
) -> Any:
    """Onyx's revocation of each PAT of ``pats`` that is a Craft PAT of ``owner`` (in the
    table ``pat``: a tenant's, in multi-tenant Onyx): ``is_revoked`` true and
    ``expires_at`` :data:`REVOCATION_SKEW` before now (never later). Also of one only
    marked ``is_revoked`` (by hand, say), which Onyx's server still accepts until its
    ``expires_at``."""
    past = now - REVOCATION_SKEW
    return (
        update(pat)
        .where(
            _owned(pats, owner, pat),
            pat.c.is_revoked.is_(False) | _live(past, pat),
        )
        .values(is_revoked=True, expires_at=_no_later_than(past, pat))
    )


def owned_pats_query(
    pats: Sequence[RowPat], pat: Table = PAT, *, owner: PatOwner
) -> Select[tuple[int]]:
    """The ids of those of ``pats`` that are in Onyx (the table ``pat``) as Craft PATs of
    ``owner``, revoked or not: the PATs a revocation acts on."""
    return select(pat.c.id).where(_owned(pats, owner, pat))


def revoke_pat_statement(
    row_pat: RowPat, now: datetime, pat: Table = PAT, *, owner: PatOwner
) -> Any:
    """Onyx's revocation: ``is_revoked`` true and ``expires_at`` in the past (never later)."""
    return revoke_pats_statement([row_pat], now, pat, owner=owner)


def grace_statement(
    row_pat: RowPat, until: datetime, now: datetime, pat: Table = PAT, *, owner: PatOwner
) -> Any:
    """Leave a superseded PAT live until ``until`` at the latest: its ``expires_at`` is
    shortened to it (never extended), so Onyx's server refuses it from then on even if the
    operator is gone by then. One marked ``is_revoked`` meanwhile expires as revoked."""
    return (
        update(pat)
        .where(_owned([row_pat], owner, pat))
        .values(
            expires_at=case(
                (pat.c.is_revoked.is_(True), _no_later_than(now - REVOCATION_SKEW, pat)),
                else_=_no_later_than(until, pat),
            )
        )
    )


def revoke_named(
    backend: StoreBackend,
    namespace: str,
    name: str,
    *,
    uid: str | None = None,
    created_at: datetime | None = None,
) -> CredentialInfo | None:
    """Revoke this cluster's row by namespace and name (its PAT and the one still in its
    grace period, if any, in the schema of the row's tenant in multi-tenant Onyx); returns
    what was revoked, if any (with ``forgotten`` saying why, for a row deleted without
    revoking anything).

    Given the sandbox's ``uid`` and creation time, a row of another uid goes only if it
    is surely an earlier sandbox's of that name, gone without its finalizer (see
    :func:`_of_a_later_namesake`). One that may be a later namesake's stays: a replica
    finalizing a stale copy of a deleted sandbox must not revoke the live one's PAT.
    """
    subject = f"sandbox {namespace}/{name}"
    with (
        translated_errors(f"revoking the PAT of {subject}"),
        backend.writer.begin() as connection,
    ):
        row = backend.fetch(connection, namespace, name, lock=True, fresh=True)
        if row is None:
            return None
        if _of_a_later_namesake(row, uid, created_at):
            log.warning(
                "%s (uid %s): left PAT %s alone: it belongs to uid %s, a sandbox of that "
                "name created since",
                subject,
                uid,
                row.pat_id,
                row.sandbox_uid,
            )
            return None
        now = backend.clock()
        info = credential_info(row, now)
        pats = joined_pats(row)
        tables = backend.revocable(connection, row.tenant_id)
        if tables is not None and pats:
            statement = revoke_pats_statement(pats, now, tables.pat, owner=owner_of(row))
            connection.execute(statement)
        connection.execute(delete(CRED).where(CRED.c.id == row.id))
        # The row's library record goes with it, whichever sandbox of this name it was
        # (an earlier one gone without its finalizer leaves no other way to find it).
        connection.execute(delete(LIBRARY).where(LIBRARY.c.sandbox_uid == row.sandbox_uid))
    if tables is None:
        log.warning(
            "%s: forgot its credential: neither Onyx tenant %r's schema nor the default "
            "schema has Onyx's tables (a tenant Onyx deleted: its PATs went with it)",
            subject,
            row.tenant_id,
        )
        return dataclasses.replace(info, forgotten=Forgotten.TENANT_GONE)
    if not pats:
        log.warning(
            "%s: forgot its credential: PAT %s is not in Onyx (deleted, or its tenant's "
            "schema recreated or restored: another sandbox's PAT may have its id)",
            subject,
            row.pat_id,
        )
        return dataclasses.replace(info, forgotten=Forgotten.PAT_NOT_IN_ONYX)
    log.info("%s: revoked PAT %s", subject, " and ".join(str(one.pat_id) for one in pats))
    return info


def _of_a_later_namesake(row: Any, uid: str | None, created_at: datetime | None) -> bool:
    """Whether ``row`` may be another sandbox's of that name, created after the one with
    ``uid`` (so not an orphan it may clean up): its sandbox's recorded creation is not
    earlier (creation times have seconds only: a namesake made in the same second may be
    the later one), or it was written after ``created_at``, give or take
    :data:`REVOCATION_SKEW` (the row's time is the operator's clock, the creation the API
    server's). Either keeps it: an older operator replacing a row leaves the previous
    sandbox's creation time on it, so an earlier time alone proves nothing (the orphan
    sweep, which asks the API server, takes what this leaves)."""
    if uid is None or created_at is None or row.sandbox_uid == uid:
        return False
    theirs = row.sandbox_created_at
    if theirs is not None and utc(theirs) >= utc(created_at):
        return True
    return bool(utc(row.created_at) >= utc(created_at) - REVOCATION_SKEW)

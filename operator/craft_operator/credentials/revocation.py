"""Revoking a sandbox's PATs the way Onyx does, and forgetting its stored token."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, case, delete, literal, update

from craft_operator.api.times import utc
from craft_operator.credentials.backend import CRED, LIBRARY, PAT, StoreBackend, log
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.model import CredentialInfo, credential_info
from craft_operator.credentials.tokens import PatType


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


def _craft_pat_of(user_id: uuid.UUID, pat: Table) -> Any:
    """Whether a PAT is a Craft PAT of ``user_id``: the operator acts on no other, whatever
    the id it looked up names (ids restart in each tenant's schema)."""
    return (pat.c.user_id == user_id) & (pat.c.pat_type == PatType.CRAFT)


def revoke_pats_statement(
    pat_ids: Sequence[int], now: datetime, pat: Table = PAT, *, user_id: uuid.UUID
) -> Any:
    """Onyx's revocation of each PAT of ``pat_ids`` that is a Craft PAT of ``user_id`` (in
    the table ``pat``: a tenant's, in multi-tenant Onyx): ``is_revoked`` true and
    ``expires_at`` :data:`REVOCATION_SKEW` before now (never later). Also of one only
    marked ``is_revoked`` (by hand, say), which Onyx's server still accepts until its
    ``expires_at``."""
    past = now - REVOCATION_SKEW
    return (
        update(pat)
        .where(
            pat.c.id.in_(list(pat_ids)),
            _craft_pat_of(user_id, pat),
            pat.c.is_revoked.is_(False) | _live(past, pat),
        )
        .values(is_revoked=True, expires_at=_no_later_than(past, pat))
    )


def revoke_pat_statement(
    pat_id: int, now: datetime, pat: Table = PAT, *, user_id: uuid.UUID
) -> Any:
    """Onyx's revocation: ``is_revoked`` true and ``expires_at`` in the past (never later)."""
    return revoke_pats_statement([pat_id], now, pat, user_id=user_id)


def grace_statement(
    pat_id: int, until: datetime, now: datetime, pat: Table = PAT, *, user_id: uuid.UUID
) -> Any:
    """Leave a superseded PAT live until ``until`` at the latest: its ``expires_at`` is
    shortened to it (never extended), so Onyx's server refuses it from then on even if the
    operator is gone by then. One marked ``is_revoked`` meanwhile expires as revoked."""
    return (
        update(pat)
        .where(pat.c.id == pat_id, _craft_pat_of(user_id, pat))
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
    what was revoked, if any.

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
        pat_ids = [row.pat_id]
        if row.superseded_pat_id is not None:
            pat_ids.append(row.superseded_pat_id)
        tables = backend.revocable(connection, row.tenant_id)
        if tables is not None:
            statement = revoke_pats_statement(pat_ids, now, tables.pat, user_id=row.user_id)
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
        return dataclasses.replace(info, forgotten=True)
    log.info("%s: revoked PAT %s", subject, " and ".join(str(pat_id) for pat_id in pat_ids))
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

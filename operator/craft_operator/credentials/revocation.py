"""Revoking a sandbox's PAT the way Onyx does, and forgetting its stored token."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, literal, update

from craft_operator.credentials.backend import CRED, PAT, StoreBackend, log
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.model import CredentialInfo, credential_info


def revoke_pat_statement(pat_id: int, now: datetime) -> Any:
    """Onyx's revocation: ``is_revoked`` true and ``expires_at`` now (never later)."""
    moment = literal(now, PAT.c.expires_at.type)
    return (
        update(PAT)
        .where(PAT.c.id == pat_id, PAT.c.is_revoked.is_(False))
        .values(
            is_revoked=True,
            expires_at=case(
                (PAT.c.expires_at.is_(None) | (PAT.c.expires_at > moment), moment),
                else_=PAT.c.expires_at,
            ),
        )
    )


def revoke_named(backend: StoreBackend, namespace: str, name: str) -> CredentialInfo | None:
    """Revoke this cluster's row by namespace and name; returns what was revoked, if any."""
    subject = f"sandbox {namespace}/{name}"
    with (
        translated_errors(f"revoking the PAT of {subject}"),
        backend.writer.begin() as connection,
    ):
        row = backend.fetch(connection, backend.lock_current, namespace, name)
        if row is None:
            return None
        now = backend.clock()
        info = credential_info(row, now)
        connection.execute(revoke_pat_statement(row.pat_id, now))
        connection.execute(delete(CRED).where(CRED.c.id == row.id))
    log.info("%s: revoked PAT %s", subject, row.pat_id)
    return info

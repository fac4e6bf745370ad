"""Retiring the PAT a renewal superseded, once the pod is shown to use the new one.

A renewal leaves the superseded PAT live for a grace period (see :mod:`.minting`) so the
running pod keeps working until the new token is delivered into it. When the reconciler
has seen ``onyx-cli`` validate the new PAT in the pod, :func:`retire` revokes the old one
at once instead of waiting for it to expire.
"""

from __future__ import annotations

from sqlalchemy import select, update

from craft_operator.credentials.backend import CRED, StoreBackend, log
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.model import SandboxIdentity
from craft_operator.credentials.revocation import PatOwner, RowPat, revoke_pat_statement
from craft_operator.credentials.tokens import pat_name


def retire(backend: StoreBackend, identity: SandboxIdentity, pat_id: int) -> int | None:
    """The pod of ``identity`` now uses PAT ``pat_id``: revoke the PAT it superseded, if
    that one is still in its grace period; returns the revoked PAT's id.

    Acts only on this cluster's row of the sandbox with this uid whose current PAT is
    ``pat_id`` (a PAT the pod validated but that has since been replaced proves nothing),
    and only on the PAT that row records as superseded, of the row's user and named after
    the sandbox (another's under that id, once its tenant's schema was recreated or
    restored, is left alone). Idempotent: the row forgets its superseded PAT, so a second
    call revokes nothing. In multi-tenant Onyx the PAT is revoked in the schema of the
    row's tenant.
    """
    with (
        translated_errors(f"retiring the superseded PAT of {identity}"),
        backend.writer.begin() as connection,
    ):
        row = connection.execute(
            select(CRED.c.id, CRED.c.user_id, CRED.c.tenant_id, CRED.c.superseded_pat_id)
            .where(
                CRED.c.cluster_id == backend.cluster_id,
                CRED.c.namespace == identity.namespace,
                CRED.c.name == identity.name,
                CRED.c.sandbox_uid == identity.uid,
                CRED.c.pat_id == pat_id,
                CRED.c.superseded_pat_id.is_not(None),
            )
            .with_for_update()
        ).one_or_none()
        if row is None:
            return None
        pat = backend.tables(connection, row.tenant_id).pat
        owner = PatOwner(row.user_id, pat_name(identity.namespace, identity.name))
        now = backend.clock()
        revoked = connection.execute(
            revoke_pat_statement(RowPat(row.superseded_pat_id), now, pat, owner=owner)
            .where(pat.c.expires_at > now)
            .returning(pat.c.id)
        ).scalar_one_or_none()
        connection.execute(
            update(CRED)
            .where(CRED.c.id == row.id)
            .values(superseded_pat_id=None, version=CRED.c.version + 1, updated_at=now)
        )
    if revoked is None:
        log.info("%s: superseded PAT %s had expired already", identity, row.superseded_pat_id)
        return None
    log.info("%s: revoked PAT %s, superseded by PAT %s", identity, revoked, pat_id)
    return int(revoked)

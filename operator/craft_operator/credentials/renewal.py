"""When a stored PAT must be replaced: the pure decision behind
:meth:`CredentialStore.ensure <craft_operator.credentials.store.CredentialStore.ensure>`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row

from craft_operator.credentials.errors import UserNotFoundError
from craft_operator.credentials.model import (
    DEFAULT_RENEWAL_FRACTION,
    DEFAULT_RENEWAL_GRACE,
    NO_CREDENTIAL,
    PatState,
    SandboxIdentity,
    pat_state,
    renewal_due_at,
)

#: Why a PAT due for renewal is replaced. Only these leave the superseded PAT live for the
#: grace period (see :data:`GRACEFUL`).
IN_RENEWAL_WINDOW = "the PAT is inside its renewal window"
OUTLIVES_LIFETIME = "the PAT outlives the sandbox's credential lifetime"

#: The replacement reasons after which the superseded PAT stays live for the grace period
#: (CRAFT_CREDENTIAL_RENEWAL_GRACE) instead of being revoked at once: the PAT is sound and
#: the sandbox's own, only due for renewal, and the pod keeps working with it until the new
#: one is delivered. Every other reason revokes it at once: a PAT the server rejected, one
#: of an earlier sandbox of that name or of another user or tenant, a token that cannot be
#: decrypted or does not match its PAT, a PAT that never expires (not one the operator
#: made), an explicit request for a new one; and a revoked, expired or deleted PAT is not
#: live anyway.
GRACEFUL = frozenset({IN_RENEWAL_WINDOW, OUTLIVES_LIFETIME})

#: A stored PAT that outlives ``now + lifetime`` by more than this is replaced, so that a
#: shortened ``spec.credentials.lifetime`` takes effect.
_LIFETIME_SLACK = timedelta(minutes=5)


@dataclass(frozen=True)
class EnsurePolicy:
    """What one :meth:`CredentialStore.ensure` call asks for."""

    identity: SandboxIdentity
    user_id: uuid.UUID
    tenant_id: str
    lifetime: timedelta
    renewal_fraction: float = DEFAULT_RENEWAL_FRACTION
    force_new: bool = False
    rejected_pat_id: int | None = None
    #: How long a PAT superseded by a renewal stays live (see :data:`GRACEFUL`).
    grace: timedelta = DEFAULT_RENEWAL_GRACE


def parse_user_id(user_id: str | uuid.UUID, identity: SandboxIdentity) -> uuid.UUID:
    """The user id as a UUID; :class:`UserNotFoundError` if it is not one."""
    if isinstance(user_id, uuid.UUID):
        return user_id
    try:
        return uuid.UUID(user_id)
    except ValueError:
        raise UserNotFoundError(f"{identity}: user id {user_id!r} is not a UUID") from None


def replacement_reason(row: Row[Any] | None, policy: EnsurePolicy, now: datetime) -> str | None:
    """Why the stored credential cannot be reused, or ``None`` if it can (pure)."""
    if row is None:
        return NO_CREDENTIAL
    if policy.force_new:
        return "a new PAT was requested"
    if policy.rejected_pat_id is not None and row.pat_id == policy.rejected_pat_id:
        return f"PAT {policy.rejected_pat_id} was rejected"
    if row.sandbox_uid != policy.identity.uid:
        return "the credential belongs to an earlier sandbox of that name"
    if row.user_id != policy.user_id:
        return "the sandbox's user changed"
    if row.tenant_id != policy.tenant_id:
        return "the sandbox's tenant changed"
    state = pat_state(row, now)
    if state is not PatState.LIVE:
        return f"the PAT is {state.value}"
    expires_at: datetime | None = row.pat_expires_at
    if expires_at is None:
        return "the PAT never expires"
    if now > renewal_due_at(expires_at, policy.lifetime, policy.renewal_fraction):
        return IN_RENEWAL_WINDOW
    if expires_at - now > policy.lifetime + _LIFETIME_SLACK:
        return OUTLIVES_LIFETIME
    return None

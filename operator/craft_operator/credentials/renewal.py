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
    PatState,
    SandboxIdentity,
    pat_state,
)

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
        return "no credential stored"
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
    remaining = expires_at - now
    if remaining < policy.lifetime * policy.renewal_fraction:
        return "the PAT is inside its renewal window"
    if remaining > policy.lifetime + _LIFETIME_SLACK:
        return "the PAT outlives the sandbox's credential lifetime"
    return None

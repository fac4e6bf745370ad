"""What the credential store hands out and reports: identities, issued PATs, stored rows.

Plain values with no database access; :mod:`craft_operator.credentials.store` re-exports
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from craft_operator.api.times import utc

if TYPE_CHECKING:
    from sqlalchemy import Row

DEFAULT_LIFETIME = timedelta(hours=720)
DEFAULT_RENEWAL_FRACTION = 0.2
#: How long a PAT superseded by a renewal stays live, at most (CRAFT_CREDENTIAL_RENEWAL_GRACE).
DEFAULT_RENEWAL_GRACE = timedelta(minutes=5)

#: How a mint's reason starts when the stored token could not be decrypted.
UNDECRYPTABLE = "the stored token cannot be decrypted with the key ring"
#: A mint's reason where no credential is stored: a first mint, or one after the row was
#: deleted (``credentials revoke`` deletes it).
NO_CREDENTIAL = "no credential stored"


def utc_now() -> datetime:
    """The current time, aware and in UTC (the store's default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class SandboxIdentity:
    """Which sandbox a credential belongs to: the CraftSandbox's namespace, name and uid,
    and when it was created (when known: it tells an earlier sandbox of that name from a
    later one)."""

    namespace: str
    name: str
    uid: str
    created_at: datetime | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"sandbox {self.namespace}/{self.name}"


def created_later(row: Any, identity: SandboxIdentity) -> bool:
    """Whether the sandbox of credential ``row`` was created after ``identity``'s (both
    creation times known and not the same second)."""
    theirs = getattr(row, "sandbox_created_at", None)
    if theirs is None or identity.created_at is None:
        return False
    return bool(utc(theirs) > utc(identity.created_at))


@dataclass(frozen=True)
class IssuedCredential:
    """The sandbox's current PAT, as :meth:`CredentialStore.ensure` returns it.

    ``token`` is a :class:`SecretStr`: its repr and str are masked; call
    ``token.get_secret_value()`` only to write the Kubernetes Secret.
    """

    token: SecretStr = field(repr=False)
    pat_id: int
    token_display: str
    created_at: datetime
    expires_at: datetime
    minted: bool
    #: The PAT this call's mint replaced (``None`` when reused): revoked at once, or left
    #: live for the grace period (then it is also ``grace_pat_id``).
    superseded_pat_id: int | None = None
    #: Why a new PAT was minted (``None`` when the stored one was reused).
    reason: str | None = None
    #: The PAT this one renewed, still live in its grace period until the pod is shown to
    #: use this one (:meth:`CredentialStore.retire`); ``None`` once it expired or was
    #: retired, or when there is none. Set on reuse too, from the stored row.
    grace_pat_id: int | None = None
    #: When ``grace_pat_id`` expires (Onyx's server refuses it from then on).
    grace_expires_at: datetime | None = None
    #: When the reconciler's memory of this PAT lapses and the database is read again for
    #: it (set by the reconciler's adapter, never by the store).
    recheck_at: datetime | None = None


class PatState(StrEnum):
    """The state of the PAT a stored credential points to."""

    LIVE = "live"
    REVOKED = "revoked"
    EXPIRED = "expired"
    MISSING = "missing"


class Forgotten(StrEnum):
    """Why a revocation only deleted a stored row, revoking nothing."""

    #: Its Onyx tenant's schema is gone, its PATs with it.
    TENANT_GONE = "tenant-gone"
    #: Its PAT is not in Onyx: deleted, or its tenant's schema recreated or restored (its
    #: id may now be another PAT's, which is left alone).
    PAT_NOT_IN_ONYX = "pat-not-in-onyx"


class Revocation(Enum):
    """What revoking a sandbox's PAT did; false only for :attr:`NOTHING`."""

    #: Nothing of the sandbox's was stored (or only a later namesake's row, left alone, or
    #: one whose Onyx tenant's schema is gone, forgotten).
    NOTHING = "nothing"
    #: Its PAT, and the one in its grace period, revoked in Onyx.
    REVOKED = "revoked"
    #: Its stored row forgotten: its PAT was no longer in Onyx (deleted there), so there
    #: was nothing to revoke.
    NOT_IN_ONYX = "not-in-onyx"

    def __bool__(self) -> bool:
        return self is not Revocation.NOTHING


@dataclass(frozen=True)
class CredentialInfo:
    """What is stored for a sandbox, without the token (for ``credentials show``)."""

    namespace: str
    name: str
    sandbox_uid: str
    user_id: str
    tenant_id: str
    pat_id: int
    token_display: str
    key_id: str
    created_at: datetime
    expires_at: datetime
    pat_state: PatState
    #: Set when the row was deleted without revoking anything: why.
    forgotten: Forgotten | None = None


@dataclass(frozen=True)
class RotationResult:
    """What :meth:`CredentialStore.rotate` did."""

    key_id: str
    changed: int
    failures: tuple[str, ...] = ()


def pat_state(row: Row[Any], now: datetime) -> PatState:
    """The state at ``now`` of the PAT a stored row (joined to its PAT) points to."""
    if row.pat_hash is None:
        return PatState.MISSING
    if row.pat_revoked:
        return PatState.REVOKED
    if row.pat_expires_at is not None and row.pat_expires_at <= now:
        return PatState.EXPIRED
    return PatState.LIVE


def live_grace_pat(row: Row[Any], now: datetime) -> tuple[int, datetime] | None:
    """The superseded PAT of a stored row (joined to it) and its end, while it is live."""
    if row.superseded_pat_id is None or row.grace_revoked is None:
        return None  # none, or deleted (the outer join found no PAT)
    if row.grace_expires_at is None or row.grace_expires_at <= now:
        return None  # a grace PAT always has an end; one without is not the operator's
    return int(row.superseded_pat_id), row.grace_expires_at


def credential_info(row: Row[Any], now: datetime) -> CredentialInfo:
    """What a stored row (joined to its PAT) says, without the token."""
    return CredentialInfo(
        namespace=row.namespace,
        name=row.name,
        sandbox_uid=row.sandbox_uid,
        user_id=str(row.user_id),
        tenant_id=row.tenant_id,
        pat_id=row.pat_id,
        token_display=row.token_display,
        key_id=row.key_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        pat_state=pat_state(row, now),
    )


def renewal_due_at(expires_at: datetime, lifetime: timedelta, fraction: float) -> datetime:
    """When a PAT that expires at ``expires_at`` enters its renewal window: the last
    ``fraction`` of the sandbox's ``lifetime`` before it expires."""
    return expires_at - lifetime * fraction

"""The bounded label values of the operator's metrics, and the names they are exported
under.

Every label value comes from a fixed set defined here: a metric never carries a user id,
a sandbox name, a bucket or a token. Unknown reasons are counted as ``Other``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

PREFIX = "craft"

#: Time to Ready: 1 s to 10 min (image pulls and slow nodes make minutes normal).
READY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 420, 600)
#: One provisioning step: a database round trip (ms) up to a pod start (minutes).
PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: One user-library sync: an empty diff (ms) up to a large library (half an hour).
SYNC_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class ProvisioningPhase(StrEnum):
    """The steps of provisioning whose durations are measured (the ``phase`` label)."""

    CREDENTIALS = "credentials"
    SECRET = "secret"  # noqa: S105 -- a step name, not a password
    SKILL = "skill"
    POD_CREATE = "pod_create"
    POD_READY = "pod_ready"
    CLI_VALIDATION = "cli_validation"


class MintReason(StrEnum):
    """Why a PAT was minted (the ``reason`` label of ``craft_pat_mints_total``)."""

    NEW = "new"
    RECREATED = "recreated"
    REQUESTED = "requested"
    REJECTED = "rejected"
    USER_CHANGED = "user_changed"
    TENANT_CHANGED = "tenant_changed"
    REVOKED = "revoked"
    EXPIRED = "expired"
    MISSING = "missing"
    RENEWAL = "renewal"
    LIFETIME = "lifetime"
    TOKEN_MISMATCH = "token_mismatch"  # noqa: S105 -- a label value, not a token
    UNDECRYPTABLE = "undecryptable"
    OTHER = "other"


# The credential store explains a mint in a sentence (it may name a PAT id); the metric
# needs a word from a fixed set. First match wins.
_MINT_PHRASES: tuple[tuple[str, MintReason], ...] = (
    # The PAT the sandbox held lost its row: credentials revoke without the cluster.
    ("is no longer stored", MintReason.REVOKED),
    ("no credential stored", MintReason.NEW),
    ("earlier sandbox of that name", MintReason.RECREATED),
    ("new pat was requested", MintReason.REQUESTED),
    ("was rejected", MintReason.REJECTED),
    ("user changed", MintReason.USER_CHANGED),
    ("tenant changed", MintReason.TENANT_CHANGED),
    ("is revoked", MintReason.REVOKED),
    ("is expired", MintReason.EXPIRED),
    ("is missing", MintReason.MISSING),
    ("renewal window", MintReason.RENEWAL),
    ("never expires", MintReason.LIFETIME),
    ("outlives", MintReason.LIFETIME),
    ("does not match", MintReason.TOKEN_MISMATCH),
    ("cannot be decrypted", MintReason.UNDECRYPTABLE),
)

#: Condition reasons of credential failures (see the reconciler's ``_credentials_reason``).
CREDENTIAL_ERROR_REASONS = frozenset(
    {
        "UserNotFound",
        "UserInactive",
        "DatabaseUnavailable",
        "KeyNotInRing",
        "KeyRingError",
        "DatabaseSchemaMissing",
        "TenantGone",
        "CredentialsError",
        "RevokeFailed",
    }
)
#: ``LibrarySyncError.reason`` values (see ``craft_operator.library.errors``), and the
#: reconciler's reason for a Job-mode sync that failed without one.
SYNC_ERROR_REASONS = frozenset(
    {
        "SyncFailed",
        "LibraryMisconfigured",
        "FileTooLarge",
        "LibraryTooLarge",
        "S3Error",
        "S3Unavailable",
        "S3AccessDenied",
        "S3BucketNotFound",
        "S3ObjectArchived",
        "LibraryChangedDuringSync",
        "DestinationFailed",
        "DestinationUnwritable",
        "ExecFailed",
        "ExecTimedOut",
        "SyncJobFailed",
        "SyncTimedOut",
    }
)
OTHER = "Other"
#: HTTP methods the API client uses, as the ``verb`` label (anything else is ``other``).
API_VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def mint_reason(explanation: str | None) -> MintReason:
    """The bounded label for the credential store's explanation of a mint."""
    text = (explanation or "").lower()
    return next((reason for phrase, reason in _MINT_PHRASES if phrase in text), MintReason.OTHER)


def bounded(value: str, allowed: Iterable[str]) -> str:
    """``value`` if it is one of ``allowed``, else ``Other`` (labels must stay bounded)."""
    return value if value in allowed else OTHER


def metric_name(metric: str) -> str:
    """The exported name of one of the operator's metrics (``craft_`` and ``metric``)."""
    return f"{PREFIX}_{metric}"

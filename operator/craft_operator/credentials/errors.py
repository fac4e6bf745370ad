"""Typed errors of the credential store.

Messages name what is wrong (the sandbox, the key id, the user id, the table) and never
contain a token, a key or a database password, so they are safe to put into a condition,
an event or a log line as they are.
"""

from __future__ import annotations


class CredentialsError(Exception):
    """Base class of every error the credential store raises."""


class UserNotFoundError(CredentialsError):
    """The sandbox's user id does not exist in Onyx's ``user`` table."""


class UserInactiveError(CredentialsError):
    """The sandbox's user exists but is inactive: Onyx would reject any PAT minted for it."""


class DatabaseUnavailableError(CredentialsError):
    """The credentials database cannot be reached (connection refused, timeout, lost link)."""


class SchemaMissingError(CredentialsError):
    """A table the store needs is missing, or the operator's table is not at this
    operator's schema revision (not migrated yet, or migrated by a newer operator)."""


class TenantGoneError(SchemaMissingError):
    """Multi-tenant Onyx: the schema of a tenant no longer exists (Onyx dropped the tenant),
    and the PATs in it went with it."""


class KeyRingError(CredentialsError):
    """The encryption key ring is malformed, or a stored token cannot be opened with it."""


class DecryptionError(KeyRingError):
    """A stored token failed to decrypt under a key the ring has: tampered, truncated,
    bound to another sandbox, or sealed by another key of the same id. The token is lost."""


class KeyNotInRingError(KeyRingError):
    """A stored token names a key id the key ring lacks. The token is not lost: the ring
    may be stale (a rotation elsewhere) or the key was dropped too early, so nothing is
    revoked until the key is back or someone revokes the PAT."""

    def __init__(self, message: str, *, key_id: str, ring_key_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        #: The key id the stored token names (key ids are not secret).
        self.key_id = key_id
        #: The key ids the ring held when the token was opened.
        self.ring_key_ids = ring_key_ids


class ClusterIdMissingError(CredentialsError):
    """CRAFT_CLUSTER_ID is unset where the database may be shared with other clusters."""

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


class KeyRingError(CredentialsError):
    """The encryption key ring is malformed, or a stored token names a key the ring lacks."""


class DecryptionError(KeyRingError):
    """A stored token failed to decrypt: tampered, truncated, or bound to another sandbox."""


class ClusterIdMissingError(CredentialsError):
    """CRAFT_CLUSTER_ID is unset where the database may be shared with other clusters."""

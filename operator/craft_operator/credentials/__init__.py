"""Onyx personal access tokens for sandboxes, minted in Onyx's format, encrypted at rest.

The reconciler uses :class:`CredentialStore` (built by :func:`build_credential_store`):
``ensure`` for the sandbox's live PAT, ``revoke`` in the finalizer. Everything it raises
derives from :class:`CredentialsError` (see :mod:`craft_operator.credentials.errors`).
"""

from typing import TYPE_CHECKING, Any

from craft_operator.credentials.errors import (
    CredentialsError,
    DatabaseUnavailableError,
    DecryptionError,
    KeyRingError,
    SchemaMissingError,
    UserInactiveError,
    UserNotFoundError,
)
from craft_operator.credentials.factory import build_credential_store, load_key_ring
from craft_operator.credentials.keyring import KeyRing, generate_key_entry
from craft_operator.credentials.model import (
    DEFAULT_LIFETIME,
    CredentialInfo,
    Forgotten,
    IssuedCredential,
    PatState,
    RotationResult,
    SandboxIdentity,
)

if TYPE_CHECKING:
    from craft_operator.credentials.store import CredentialStore


def __getattr__(name: str) -> Any:
    # The store brings SQLAlchemy and Alembic: imported when first named, so that an
    # operator that only watches, and the reconciler's imports, do not load them.
    if name == "CredentialStore":
        from craft_operator.credentials.store import CredentialStore

        return CredentialStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LIFETIME",
    "CredentialInfo",
    "CredentialStore",
    "CredentialsError",
    "DatabaseUnavailableError",
    "DecryptionError",
    "Forgotten",
    "IssuedCredential",
    "KeyRing",
    "KeyRingError",
    "PatState",
    "RotationResult",
    "SandboxIdentity",
    "SchemaMissingError",
    "UserInactiveError",
    "UserNotFoundError",
    "build_credential_store",
    "generate_key_entry",
    "load_key_ring",
]

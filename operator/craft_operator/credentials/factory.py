"""Build the credential store from the operator's settings."""

from __future__ import annotations

import logging

from craft_operator.config import Settings
from craft_operator.credentials.db import (
    check_schema,
    create_credentials_engine,
    describe_url,
    upgrade,
)
from craft_operator.credentials.keyring import KeyRing, development_key_ring, key_ring_from_file
from craft_operator.credentials.store import CredentialStore

log = logging.getLogger(__name__)


def load_key_ring(settings: Settings) -> KeyRing:
    """The key ring from CRAFT_ENCRYPTION_KEYS, else its file, else the development ring."""
    if settings.encryption_keys is not None:
        return KeyRing.parse(settings.encryption_keys)
    if settings.encryption_keys_file is not None:
        return key_ring_from_file(settings.encryption_keys_file)
    return development_key_ring(settings.state_dir)


def build_credential_store(settings: Settings, *, migrate: bool | None = None) -> CredentialStore:
    """A ready credential store: key ring loaded, schema checked or migrated.

    ``migrate`` overrides CRAFT_DATABASE_AUTO_MIGRATE. Raises :class:`KeyRingError`,
    :class:`SchemaMissingError` or :class:`DatabaseUnavailableError` with a clear message.
    """
    engine = create_credentials_engine(settings.database_url_value)
    try:
        keyring = load_key_ring(settings)
        if settings.database_auto_migrate if migrate is None else migrate:
            upgrade(engine)
        else:
            check_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    log.info(
        "credential store ready: %s, encrypting with key %r",
        describe_url(settings.database_url_value),
        keyring.current_key_id,
    )
    return CredentialStore(
        engine,
        keyring,
        renewal_fraction=settings.credential_renewal_fraction,
        owns_engine=True,
    )

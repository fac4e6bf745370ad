"""Build the credential store from the operator's settings."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from craft_operator.config import Settings
from craft_operator.credentials.errors import ClusterIdMissingError, KeyRingError
from craft_operator.credentials.keyring import (
    DEV_KEY_RING_FILE,
    KeyRing,
    development_key_ring,
    key_ring_from_file,
)

if TYPE_CHECKING:
    from craft_operator.credentials.store import CredentialStore

log = logging.getLogger(__name__)


def production_signs(
    settings: Settings, *, peering: bool = False, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Why this operator is not a developer's: each rules out the development key ring.

    Tokens sealed with a key ring made on the spot are lost with the pod that made it (and
    another replica cannot open them), so production must bring its own.
    """
    environ = os.environ if environ is None else environ
    signs = []
    if environ.get("KUBERNETES_SERVICE_HOST"):
        signs.append("it runs in a pod")
    if settings.database_url_value.startswith("postgresql"):
        signs.append("CRAFT_DATABASE_URL is a Postgres database")
    if peering:
        signs.append("it peers with other replicas")
    return signs


def check_key_ring_setting(settings: Settings, *, peering: bool = False) -> None:
    """Raise :class:`KeyRingError` if no key ring is set where the development one is unfit."""
    if settings.encryption_keys is not None or settings.encryption_keys_file is not None:
        return
    signs = production_signs(settings, peering=peering)
    if signs:
        raise KeyRingError(
            "CRAFT_ENCRYPTION_KEYS (or CRAFT_ENCRYPTION_KEYS_FILE) must be set: "
            f"{' and '.join(signs)}, and the development key ring is for development only "
            "(make one with: craft-operator keys generate)"
        )


def check_cluster_id_setting(settings: Settings) -> str:
    """This cluster's id, or :class:`ClusterIdMissingError` if none is set where it must be.

    On Postgres (Onyx's database, which other clusters' operators may share) there is no
    default: rows keyed by a guessed id would let two clusters take each other's rows.
    """
    cluster_id = settings.effective_cluster_id
    if cluster_id is None:
        raise ClusterIdMissingError(
            "CRAFT_CLUSTER_ID must be set: CRAFT_DATABASE_URL is a Postgres database that other "
            "clusters' operators may share, and each keeps to the credential rows of its own "
            "id (set a name unique among them, and keep it when the cluster is rebuilt)"
        )
    return cluster_id


def load_key_ring(settings: Settings, *, peering: bool = False) -> KeyRing:
    """The key ring from CRAFT_ENCRYPTION_KEYS, else its file, else the development ring
    (only where nothing says this is production: see :func:`production_signs`)."""
    if settings.encryption_keys is not None:
        return KeyRing.parse(settings.encryption_keys)
    if settings.encryption_keys_file is not None:
        return key_ring_from_file(settings.encryption_keys_file)
    check_key_ring_setting(settings, peering=peering)
    return development_key_ring(settings.state_dir)


def check_key_ring_loads(settings: Settings, *, peering: bool = False) -> KeyRing | None:
    """Load the key ring the operator will use, so that a bad one stops it at start with
    one :class:`KeyRingError` (naming entries by position, never echoing a key) instead of
    failing every sandbox once the store is opened on first use.

    Returns the ring, or None when the development ring is not made yet (the operator makes
    it on first use; nothing is created here).
    """
    check_key_ring_setting(settings, peering=peering)
    if settings.encryption_keys is None and settings.encryption_keys_file is None:
        path = settings.state_dir / DEV_KEY_RING_FILE
        return key_ring_from_file(path) if path.exists() else None
    return load_key_ring(settings, peering=peering)


def build_credential_store(settings: Settings, *, migrate: bool | None = None) -> CredentialStore:
    """A ready credential store: key ring loaded, schema checked or migrated.

    ``migrate`` overrides CRAFT_DATABASE_AUTO_MIGRATE; ``migrate=False`` only checks the
    schema is this operator's revision (:class:`SchemaMissingError` if not: older, or
    migrated by a newer operator). Raises :class:`ClusterIdMissingError`,
    :class:`KeyRingError`, :class:`SchemaMissingError` or :class:`DatabaseUnavailableError`
    with a clear message.
    """
    # SQLAlchemy and Alembic come with the store, not with the settings checks above.
    from craft_operator.credentials.db import (
        check_schema,
        create_credentials_engine,
        describe_url,
        upgrade,
    )
    from craft_operator.credentials.store import CredentialStore

    cluster_id = check_cluster_id_setting(settings)
    engine = create_credentials_engine(settings.database_url_value)
    try:
        keyring = load_key_ring(settings)
        multi_tenant = settings.onyx_multi_tenant
        if settings.database_auto_migrate if migrate is None else migrate:
            upgrade(engine, multi_tenant=multi_tenant)
        else:
            check_schema(engine, multi_tenant=multi_tenant)
        store = CredentialStore(
            engine,
            keyring,
            renewal_fraction=settings.credential_renewal_fraction,
            renewal_grace=timedelta(seconds=settings.credential_renewal_grace),
            owns_engine=True,
            cluster_id=cluster_id,
            multi_tenant=multi_tenant,
        )
    except BaseException:
        engine.dispose()
        raise
    log.info(
        "credential store ready: %s%s, encrypting with key %r",
        describe_url(settings.database_url_value),
        ", Onyx's tables in each tenant's schema" if store.multi_tenant else "",
        keyring.current_key_id,
    )
    return store

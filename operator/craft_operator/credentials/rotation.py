"""Re-encrypting this cluster's stored tokens under the key ring's current key, and
counting the stored tokens each key encrypts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import SecretStr
from sqlalchemy import select, update

from craft_operator.credentials.backend import CRED, StoreBackend
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.keyring import open_token, parse_header, seal_token
from craft_operator.credentials.model import RotationResult


def rotate(
    backend: StoreBackend,
    *,
    batch_size: int = 100,
    progress: Callable[[int], None] | None = None,
) -> RotationResult:
    """Re-encrypt every token this cluster stores under the current key, one batch per
    transaction (see :meth:`CredentialStore.rotate`)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    current = backend.keyring.current_key_id
    changed, last_id, failures = 0, 0, list[str]()
    while True:
        batch = _rotate_batch(backend, current, after_id=last_id, batch_size=batch_size)
        if batch is None:
            return RotationResult(current, changed, tuple(failures))
        batch_changed, last_id, batch_failures = batch
        changed += batch_changed
        failures += batch_failures
        if progress is not None:
            progress(changed)


def _rotate_batch(
    backend: StoreBackend, current: str, *, after_id: int, batch_size: int
) -> tuple[int, int, list[str]] | None:
    """Re-encrypt one batch in one transaction; None when no rows are left."""
    changed, failures = 0, list[str]()
    with (
        translated_errors("rotating the credential encryption key"),
        backend.writer.begin() as connection,
    ):
        rows = connection.execute(
            select(
                CRED.c.id,
                CRED.c.namespace,
                CRED.c.name,
                CRED.c.sandbox_uid,
                CRED.c.encrypted_token,
            )
            .where(
                CRED.c.cluster_id == backend.cluster_id,
                CRED.c.key_id != current,
                CRED.c.id > after_id,
            )
            .order_by(CRED.c.id)
            .limit(batch_size)
            .with_for_update(skip_locked=True)
        ).all()
        if not rows:
            return None
        for row in rows:
            subject = f"sandbox {row.namespace}/{row.name}"
            try:
                token = open_token(
                    backend.keyring,
                    row.encrypted_token,
                    sandbox_uid=row.sandbox_uid,
                    subject=subject,
                )
            except CredentialsError as exc:
                failures.append(str(exc))
                continue
            connection.execute(_re_encrypted(backend, row.id, row.sandbox_uid, token, current))
            changed += 1
    return changed, int(rows[-1].id), failures


def _re_encrypted(
    backend: StoreBackend, row_id: int, sandbox_uid: str, token: SecretStr, key_id: str
) -> Any:
    """The update that stores one row's token sealed again under the current key."""
    return (
        update(CRED)
        .where(CRED.c.id == row_id)
        .values(
            encrypted_token=seal_token(backend.keyring, token, sandbox_uid=sandbox_uid),
            key_id=key_id,
            version=CRED.c.version + 1,
            updated_at=backend.clock(),
        )
    )


def key_ids_in_use(backend: StoreBackend) -> dict[str, int]:
    """How many of this cluster's stored tokens each key id encrypts (read from the
    envelopes' key id)."""
    counts: dict[str, int] = {}
    query = select(CRED.c.encrypted_token).where(CRED.c.cluster_id == backend.cluster_id)
    with (
        translated_errors("counting stored tokens by key"),
        backend.reader.connect() as connection,
    ):
        for (envelope,) in connection.execute(query):
            key_id, _ = parse_header(envelope, subject="a stored credential")
            counts[key_id] = counts.get(key_id, 0) + 1
    return counts

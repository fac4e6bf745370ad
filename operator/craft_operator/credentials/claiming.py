"""Claiming a sandbox's row from before cluster ids, on proof that it is this cluster's.

Such a row (``cluster_id`` NULL) is claimed only when it records the sandbox's uid and its
token opens with this cluster's key ring for that uid. Another cluster's row is left
exactly as it is: neither reused nor revoked.

A token that fails authentication under the ring's key of its id is taken for another
cluster's: the row is left alone. One sealed under a key id the ring lacks may be this cluster's all
the same (the ring may be stale, as in :mod:`craft_operator.credentials.ensuring`): the
ring's file is re-read and, if the key is still missing, :class:`KeyNotInRingError` names
the ways out, and nothing is claimed, revoked or minted beside the row's PAT.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from craft_operator.credentials.backend import CRED, StoreBackend, log
from craft_operator.credentials.db import is_unique_violation
from craft_operator.credentials.errors import CredentialsError, KeyNotInRingError
from craft_operator.credentials.keyring import open_token
from craft_operator.credentials.model import SandboxIdentity

_READ_UNCLAIMED = select(
    CRED.c.id, CRED.c.version, CRED.c.sandbox_uid, CRED.c.encrypted_token
).where(
    CRED.c.cluster_id.is_(None),
    CRED.c.namespace == bindparam("namespace"),
    CRED.c.name == bindparam("name"),
)


def claim_unclaimed(backend: StoreBackend, identity: SandboxIdentity) -> bool:
    """Claim the sandbox's row from before cluster ids if it proves to be this cluster's;
    True when the caller should read again.

    Raises :class:`KeyNotInRingError` when the row's token is sealed under a key id the
    ring lacks even after re-reading its file.
    """
    with backend.reader.connect() as connection:
        row = connection.execute(
            _READ_UNCLAIMED, {"namespace": identity.namespace, "name": identity.name}
        ).first()
    if row is None or row.sandbox_uid != identity.uid:
        return False
    try:
        open_token(
            backend.keyring, row.encrypted_token, sandbox_uid=identity.uid, subject=str(identity)
        )
    except KeyNotInRingError as exc:
        raise _stranded(exc, identity) from None
    except CredentialsError:
        return False
    try:
        with backend.writer.begin() as connection:
            claimed = connection.execute(
                update(CRED)
                .where(
                    CRED.c.id == row.id,
                    CRED.c.version == row.version,
                    CRED.c.cluster_id.is_(None),
                )
                .values(cluster_id=backend.cluster_id, version=row.version + 1)
            ).rowcount
    except IntegrityError as exc:
        if is_unique_violation(exc):  # this cluster's row appeared meanwhile
            return True
        raise
    if claimed:
        log.info("%s: claimed its credential row from before cluster ids", identity)
    return True


def _stranded(exc: KeyNotInRingError, identity: SandboxIdentity) -> KeyNotInRingError:
    """The error for a row from before cluster ids whose token's key the ring lacks: what
    is missing, and the ways out (``credentials revoke`` alone reaches only this cluster's
    rows, so the row is adopted first; key ids are not secret)."""
    namespace, sandbox = identity.namespace, f"{identity.namespace}/{identity.name}"
    return KeyNotInRingError(
        f"{exc}; the row is from before cluster ids, and nothing was claimed or revoked: "
        f"put key {exc.key_id!r} back in the key ring (CRAFT_ENCRYPTION_KEYS or "
        "CRAFT_ENCRYPTION_KEYS_FILE) to go on with the stored token, or, if the row is this "
        f"cluster's, run: craft-operator credentials adopt --namespace {namespace}, then: "
        f"craft-operator credentials revoke {sandbox} for a new PAT",
        key_id=exc.key_id,
        ring_key_ids=exc.ring_key_ids,
    )

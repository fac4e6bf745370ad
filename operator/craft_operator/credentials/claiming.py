"""Claiming a sandbox's row from before cluster ids, on proof that it is this cluster's.

Such a row (``cluster_id`` NULL) is claimed only when it records the sandbox's uid and its
token opens with this cluster's key ring for that uid. Another cluster's row is left
exactly as it is: neither reused nor revoked.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from craft_operator.credentials.backend import CRED, StoreBackend, log
from craft_operator.credentials.db import is_unique_violation
from craft_operator.credentials.errors import CredentialsError
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
    True when the caller should read again."""
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

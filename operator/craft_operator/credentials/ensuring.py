"""Ensuring a sandbox's live PAT: read its row with one query, reuse the stored token while
its PAT is live, its hash matches and it is outside the renewal window, and otherwise mint.

Concurrency: on Postgres the row is locked with ``SELECT ... FOR UPDATE``; on SQLite the
write transaction holds the database write lock (``BEGIN IMMEDIATE``). A row that changed
since it was read, or a new row that lost the ``(cluster_id, namespace, name)`` unique
constraint to another writer, rolls back (the new PAT with it) and the caller reads and
decides again, so any number of threads or processes leave exactly one live PAT.

A stored token that cannot be opened is handled by why: one that fails authentication under
the key of its id (altered, copied, or sealed by another key of that id) is lost, so its
PAT is revoked and replaced at once; one sealed under a key id the ring lacks is not lost
(the ring may be stale: ``keys rotate`` run elsewhere with a newer ring), so the ring's file
is re-read and, if the key is still missing, nothing is revoked or replaced and
:class:`KeyNotInRingError` names the ways out.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row
from sqlalchemy.exc import DBAPIError, IntegrityError

from craft_operator.credentials.backend import StoreBackend, log
from craft_operator.credentials.claiming import claim_unclaimed
from craft_operator.credentials.db import is_retryable, is_unique_violation, translated_errors
from craft_operator.credentials.errors import (
    CredentialsError,
    KeyNotInRingError,
    KeyRingError,
    UserInactiveError,
)
from craft_operator.credentials.keyring import open_token
from craft_operator.credentials.minting import LostRaceError, mint
from craft_operator.credentials.model import (
    UNDECRYPTABLE,
    IssuedCredential,
    SandboxIdentity,
    created_later,
    live_grace_pat,
)
from craft_operator.credentials.renewal import EnsurePolicy, replacement_reason
from craft_operator.credentials.tokens import hash_token

_MAX_ATTEMPTS = 8


def ensure_credential(backend: StoreBackend, policy: EnsurePolicy) -> IssuedCredential:
    """The sandbox's live PAT, reused or minted; reads and decides again after a lost race.

    Raises :class:`CredentialsError` when other writers kept changing the credential.
    """
    identity = policy.identity
    for _attempt in range(_MAX_ATTEMPTS):
        with translated_errors(f"ensuring the PAT of {identity}"):
            issued = _attempt_once(backend, policy)
            if issued is not None:
                return issued
    raise CredentialsError(
        f"{identity}: gave up after {_MAX_ATTEMPTS} attempts: other writers kept changing "
        "the credential"
    )


def _attempt_once(backend: StoreBackend, policy: EnsurePolicy) -> IssuedCredential | None:
    """Read, decide, and reuse or mint; None when another writer won and it must be redone."""
    identity = policy.identity
    with backend.reader.connect() as connection:
        row = backend.fetch(
            connection,
            identity.namespace,
            identity.name,
            tenant_id=policy.tenant_id,
            user_id=policy.user_id,
        )
    if row is None and claim_unclaimed(backend, identity):
        return None
    _check_not_a_later_namesakes(row, identity)
    _check_user(backend, row, identity)
    reason = replacement_reason(row, policy, backend.clock())
    if reason is None:
        assert row is not None
        try:
            issued = _reuse(backend, row, identity)
        except KeyNotInRingError as exc:
            raise _stranded(exc, identity) from None
        except KeyRingError as exc:
            # The envelope was altered, or its key id now names another key: the token is
            # lost to us, so its PAT is revoked and replaced now, not at renewal.
            log.warning("%s; revoking PAT %s and minting a new one", exc, row.pat_id)
            issued, reason = None, f"{UNDECRYPTABLE}: {exc}"
        if issued is not None:
            return issued
        reason = reason or "the stored token does not match its PAT"
    try:
        return mint(backend, policy, row, reason)
    except LostRaceError:
        return None
    except IntegrityError as exc:
        if is_unique_violation(exc):
            return None
        raise
    except DBAPIError as exc:
        if is_retryable(exc):
            return None
        raise


def _check_not_a_later_namesakes(row: Row[Any] | None, identity: SandboxIdentity) -> None:
    """Refuse to replace the row of a sandbox of that name created after this one: this
    one is gone (a replica or a database call running late saw it): its PAT is live."""
    if row is None or row.sandbox_uid == identity.uid or not created_later(row, identity):
        return
    raise CredentialsError(
        f"{identity} (uid {identity.uid}): left PAT {row.pat_id} alone: it belongs to uid "
        f"{row.sandbox_uid}, a sandbox of that name created since"
    )


def _check_user(backend: StoreBackend, row: Row[Any] | None, identity: SandboxIdentity) -> None:
    if backend.onyx_mode and row is not None and row.user_active is False:
        raise UserInactiveError(f"{identity}: user {row.user_id} is inactive in Onyx")


def _stranded(exc: KeyNotInRingError, identity: SandboxIdentity) -> KeyNotInRingError:
    """The error for a stored token whose key the ring lacks: what is missing, and the two
    ways out (key ids are not secret)."""
    sandbox = f"{identity.namespace}/{identity.name}"
    return KeyNotInRingError(
        f"{exc}; nothing was revoked: put key {exc.key_id!r} back in the key ring "
        "(CRAFT_ENCRYPTION_KEYS or CRAFT_ENCRYPTION_KEYS_FILE) to go on with the stored "
        f"token, or run: craft-operator credentials revoke {sandbox} for a new PAT",
        key_id=exc.key_id,
        ring_key_ids=exc.ring_key_ids,
    )


def _reuse(
    backend: StoreBackend, row: Row[Any], identity: SandboxIdentity
) -> IssuedCredential | None:
    """The stored credential, or None when its token does not match its PAT's hash."""
    token = open_token(
        backend.keyring, row.encrypted_token, sandbox_uid=identity.uid, subject=str(identity)
    )
    if hash_token(token) != row.pat_hash:
        log.warning(
            "%s: the stored token does not match PAT %s; minting a new one",
            identity,
            row.pat_id,
        )
        return None
    grace = live_grace_pat(row, backend.clock())
    return IssuedCredential(
        token=token,
        pat_id=row.pat_id,
        token_display=row.token_display,
        created_at=row.created_at,
        expires_at=row.expires_at,
        minted=False,
        grace_pat_id=None if grace is None else grace[0],
        grace_expires_at=None if grace is None else grace[1],
    )

"""The credential store: one live Onyx PAT per sandbox, its token encrypted at rest.

:meth:`CredentialStore.ensure` is what the reconciler calls (from a worker thread, through
``asyncio.to_thread``). It reads the sandbox's row with one query and reuses the stored
token while its PAT is live, its hash matches, and it is outside the renewal window.
Otherwise it mints in one write transaction: lock the row and check it is the version
the decision was made on, insert the new PAT and revoke the superseded one (one statement
on Postgres), and point the row at the new PAT, so the switch is atomic. On Postgres a
reuse is one statement in autocommit; a mint is four statements and one commit.

Renewal without restart: a PAT replaced only because it is due for renewal is not revoked
but left live for ``renewal_grace`` (its ``expires_at`` shortened to the end of it, which
Onyx's server enforces), so the running pod keeps working until the new token is delivered
into it; :meth:`CredentialStore.retire` revokes it as soon as the pod is shown to use the
new one. Deleting the sandbox, or its orphaned row, revokes both.

Concurrency: on Postgres the row is locked with ``SELECT ... FOR UPDATE``; on SQLite the
write transaction holds the database write lock (``BEGIN IMMEDIATE``). A row that changed
since it was read, or a new row that lost the ``(cluster_id, namespace, name)`` unique
constraint to another writer, rolls back (the new PAT with it) and the caller reads and
decides again, so any number of threads or processes leave exactly one live PAT.

Clusters: several clusters' operators may share Onyx's Postgres. Each store has its
cluster id and every query it makes (read, mint, revoke, show, rotate) is limited to rows
of that id, so the same namespace and name in two clusters are two rows and two PATs. A
row from before cluster ids (NULL) is claimed only when it proves to be this cluster's:
it records the sandbox's uid and its token opens with this key ring for that uid.

Tenants: with ``multi_tenant`` (multi-tenant Onyx, ``CRAFT_ONYX_MULTI_TENANT``) every read
and write of Onyx's tables is in the schema named by the sandbox's tenant id (see
:mod:`.tenants`), each schema checked the first time it is used; the operator's own rows
stay in the default schema.

Keys: a stored token that fails authentication under the ring's key of its id is lost, and
:meth:`CredentialStore.ensure` revokes and replaces its PAT. One sealed under a key id the
ring lacks is not: the ring may be stale (``keys rotate`` run elsewhere with a newer ring),
so the ring's file is re-read (:meth:`KeyRing.reload`) and, if the key is still missing,
nothing is revoked and :class:`KeyNotInRingError` is raised.

This module is the facade; the work is done by its neighbours: :mod:`.ensuring` (reuse or
mint), :mod:`.renewal` (when to replace), :mod:`.minting`, :mod:`.retiring` (the PAT in
its grace period), :mod:`.claiming` (rows from before cluster ids), :mod:`.revocation` and
:mod:`.rotation`, all through one
:class:`~craft_operator.credentials.backend.StoreBackend`. The values they return are in
:mod:`.model`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.engine import URL, Connection

from craft_operator.config import EMBEDDED_CLUSTER_ID
from craft_operator.credentials.backend import StoreBackend
from craft_operator.credentials.claiming import claim_unclaimed
from craft_operator.credentials.db import create_credentials_engine, translated_errors
from craft_operator.credentials.ensuring import ensure_credential
from craft_operator.credentials.keyring import KeyRing
from craft_operator.credentials.model import (
    DEFAULT_LIFETIME,
    DEFAULT_RENEWAL_FRACTION,
    DEFAULT_RENEWAL_GRACE,
    UNDECRYPTABLE,
    CredentialInfo,
    Forgotten,
    IssuedCredential,
    PatState,
    Revocation,
    RotationResult,
    SandboxIdentity,
    credential_info,
    utc_now,
)
from craft_operator.credentials.renewal import EnsurePolicy, parse_user_id, replacement_reason
from craft_operator.credentials.retiring import retire as retire_superseded
from craft_operator.credentials.revocation import revoke_named, revoke_pat_statement
from craft_operator.credentials.rotation import KeyUsage, RotationReport, key_usage
from craft_operator.credentials.rotation import key_ids_in_use as count_key_ids
from craft_operator.credentials.rotation import rotate as rotate_tokens
from craft_operator.credentials.tenants import OnyxTables

__all__ = [
    "DEFAULT_LIFETIME",
    "DEFAULT_RENEWAL_FRACTION",
    "DEFAULT_RENEWAL_GRACE",
    "UNDECRYPTABLE",
    "CredentialInfo",
    "CredentialStore",
    "EnsurePolicy",
    "IssuedCredential",
    "KeyUsage",
    "PatState",
    "RotationReport",
    "RotationResult",
    "SandboxIdentity",
    "replacement_reason",
    "revoke_pat_statement",
    "utc_now",
]


class CredentialStore:
    """Mints, reuses, revokes and shows sandbox PATs. Thread-safe; blocking (use a thread).

    ``engine_or_url`` is an engine or a SQLAlchemy URL; :meth:`close` disposes an engine
    made from a URL, or a given one when ``owns_engine`` is true. The schema must already
    be in place: see :func:`craft_operator.credentials.factory.build_credential_store`.
    ``multi_tenant``: Onyx's tables are in a schema per tenant (multi-tenant Onyx, on
    Postgres only).
    """

    def __init__(
        self,
        engine_or_url: Engine | str | URL,
        keyring: KeyRing,
        *,
        renewal_fraction: float = DEFAULT_RENEWAL_FRACTION,
        renewal_grace: timedelta = DEFAULT_RENEWAL_GRACE,
        clock: Callable[[], datetime] = utc_now,
        owns_engine: bool = False,
        cluster_id: str = EMBEDDED_CLUSTER_ID,
        multi_tenant: bool = False,
    ) -> None:
        if not 0 <= renewal_fraction < 1:
            raise ValueError("renewal_fraction must be in [0, 1)")
        if renewal_grace <= timedelta(0):
            raise ValueError("renewal_grace must be positive")
        self._renewal_grace = renewal_grace
        if isinstance(engine_or_url, Engine):
            engine, self._owns_engine = engine_or_url, owns_engine
        else:
            engine, self._owns_engine = create_credentials_engine(engine_or_url), True
        self._renewal_fraction = renewal_fraction
        if not cluster_id:
            raise ValueError("cluster_id must not be empty")
        #: The only rows this store reads or writes; written on every row it mints.
        self.cluster_id = cluster_id
        try:
            self._backend = StoreBackend.open(
                engine, keyring, clock=clock, cluster_id=cluster_id, multi_tenant=multi_tenant
            )
        except BaseException:
            if self._owns_engine:
                engine.dispose()
            raise

    def __repr__(self) -> str:
        return (
            f"CredentialStore(dialect={self.engine.dialect.name!r}, "
            f"cluster_id={self.cluster_id!r}, keyring={self.keyring!r}, "
            f"renewal_fraction={self._renewal_fraction}, "
            f"renewal_grace={self._renewal_grace.total_seconds():g}s, "
            f"multi_tenant={self.multi_tenant})"
        )

    @property
    def engine(self) -> Engine:
        """The engine the store uses."""
        return self._backend.engine

    @property
    def onyx_mode(self) -> bool:
        """True on Onyx's Postgres, False on the embedded SQLite database."""
        return self._backend.onyx_mode

    @property
    def multi_tenant(self) -> bool:
        """True when Onyx's tables are in a schema per tenant (multi-tenant Onyx)."""
        return self._backend.multi_tenant

    def revocable(self, connection: Connection, tenant_id: str) -> OnyxTables | None:
        """Where a row of ``tenant_id`` has its PATs revoked; see
        :meth:`StoreBackend.revocable`."""
        return self._backend.revocable(connection, tenant_id)

    def tables(self, connection: Connection, tenant_id: str, *, fresh: bool = False) -> OnyxTables:
        """Onyx's tables where ``tenant_id`` has them (its schema, in multi-tenant Onyx,
        checked on ``connection`` the first time); see :meth:`StoreBackend.tables`."""
        return self._backend.tables(connection, tenant_id, fresh=fresh)

    @property
    def keyring(self) -> KeyRing:
        """The key ring that encrypts and decrypts stored tokens."""
        return self._backend.keyring

    def close(self) -> None:
        """Release the database connections if the store created its own engine."""
        if self._owns_engine:
            self.engine.dispose()

    def ensure(
        self,
        identity: SandboxIdentity,
        *,
        user_id: str | uuid.UUID,
        tenant_id: str,
        lifetime: timedelta = DEFAULT_LIFETIME,
        force_new: bool = False,
        rejected_pat_id: int | None = None,
    ) -> IssuedCredential:
        """Return the sandbox's live PAT, minting (and retiring the old one) when needed.

        ``force_new`` always mints. ``rejected_pat_id`` mints unless the stored PAT is
        already another one: the reconciler passes the id of a PAT the server refused, and
        concurrent callers do not replace a PAT that a sibling has just minted.

        A stored token that fails to decrypt under the ring's key of its id
        (:class:`DecryptionError`: altered, copied from another sandbox, or sealed by
        another key of that id) is not raised: its PAT is revoked and a new one minted,
        the reason starting with :data:`UNDECRYPTABLE`.

        Raises :class:`UserNotFoundError`, :class:`UserInactiveError`,
        :class:`KeyNotInRingError` (the stored token's key id is not in the ring, even after
        re-reading the ring's file; nothing was revoked, and the message names the key id,
        the ring's ids and the ways out), :class:`DatabaseUnavailableError`,
        :class:`SchemaMissingError`, or :class:`CredentialsError` (other writers kept
        changing the row, or another database error).
        """
        if lifetime <= timedelta(0):
            raise ValueError("lifetime must be positive")
        policy = EnsurePolicy(
            identity=identity,
            user_id=parse_user_id(user_id, identity),
            tenant_id=tenant_id,
            lifetime=lifetime,
            renewal_fraction=self._renewal_fraction,
            force_new=force_new,
            rejected_pat_id=rejected_pat_id,
            grace=self._renewal_grace,
        )
        return ensure_credential(self._backend, policy)

    def retire(self, identity: SandboxIdentity, pat_id: int) -> int | None:
        """The sandbox's pod now uses PAT ``pat_id``: revoke the PAT it superseded, if that
        one is still in its grace period; returns the revoked PAT's id.

        Only when ``pat_id`` is the current PAT of this cluster's row of this sandbox (its
        uid included); never revokes any other PAT. Idempotent.
        """
        return retire_superseded(self._backend, identity, pat_id)

    def revoke(
        self, identity: SandboxIdentity, *, created_at: datetime | None = None
    ) -> Revocation:
        """Revoke the sandbox's PAT and forget its token; :attr:`Revocation.NOTHING` (false)
        if none was stored, :attr:`Revocation.NOT_IN_ONYX` if its PAT was gone from Onyx.

        Idempotent. Matches this cluster's row by namespace and name: a row with another
        uid is an orphan of an earlier object of that name and goes too, unless it may be a
        later namesake's (created in the same second or after ``created_at``, the
        sandbox's creation when known, or written within the clocks' skew of it): then it
        stays, for the orphan sweep. A row from before cluster ids goes only if it proves
        to be this sandbox's.
        """
        revoke = functools.partial(
            revoke_named,
            self._backend,
            identity.namespace,
            identity.name,
            uid=identity.uid,
            created_at=created_at,
        )
        with translated_errors(f"revoking the PAT of {identity}"):
            revoked = _revocation(revoke())
            # True also when the claim lost to this cluster's row of that name: a later
            # namesake's, which the guard must keep here too.
            if claim_unclaimed(self._backend, identity):
                again = _revocation(revoke())
                if again is Revocation.REVOKED or not revoked:
                    revoked = again
        return revoked

    def revoke_named(self, namespace: str, name: str) -> CredentialInfo | None:
        """Revoke this cluster's row by namespace and name (for the CLI); returns what was
        revoked, if any."""
        return revoke_named(self._backend, namespace, name)

    def show(self, namespace: str, name: str) -> CredentialInfo | None:
        """What this cluster stores for a sandbox (never the token), or None."""
        backend = self._backend
        with (
            translated_errors(f"reading the credential of sandbox {namespace}/{name}"),
            backend.reader.connect() as connection,
        ):
            row = backend.fetch(connection, namespace, name)
        return None if row is None else credential_info(row, backend.clock())

    def rotate(
        self,
        *,
        batch_size: int = 100,
        progress: Callable[[int], None] | None = None,
    ) -> RotationReport:
        """Re-encrypt every token this cluster stores under the current key, one batch per
        transaction. Other clusters' rows, and rows from before cluster ids, are left alone
        (another cluster's key ring may lack this one's current key): see
        :meth:`key_usage` for the keys those still need.

        Safe to interrupt and run again: each batch commits on its own, and rows already
        under the current key are skipped. Rows that fail to decrypt are reported in
        ``failures`` and left alone; rows another writer held locked are skipped and
        counted in ``busy`` (run again). ``progress`` is called with the running count
        after each committed batch.
        """
        return rotate_tokens(self._backend, batch_size=batch_size, progress=progress)

    def key_ids_in_use(self) -> dict[str, int]:
        """How many of this cluster's stored tokens each key id encrypts (read from the
        envelopes' key id; rows whose header cannot be read are left out)."""
        return count_key_ids(self._backend)

    def key_usage(self, *, sample_per_key: int = 0) -> KeyUsage:
        """This cluster's stored tokens and those of rows without a cluster id by key id,
        the rows whose envelope header cannot be read, and up to ``sample_per_key`` of
        this cluster's tokens per key id opened to prove the ring's key of that id."""
        return key_usage(self._backend, sample_per_key=sample_per_key)


def _revocation(info: CredentialInfo | None) -> Revocation:
    """What :func:`revoke_named` did, as :meth:`CredentialStore.revoke` tells it: nothing
    also when it only forgot a row whose tenant's schema is gone."""
    if info is None or info.forgotten is Forgotten.TENANT_GONE:
        return Revocation.NOTHING
    if info.forgotten is Forgotten.PAT_NOT_IN_ONYX:
        return Revocation.NOT_IN_ONYX
    return Revocation.REVOKED

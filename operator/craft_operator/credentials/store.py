"""The credential store: one live Onyx PAT per sandbox, its token encrypted at rest.

:meth:`CredentialStore.ensure` is what the reconciler calls (from a worker thread, through
``asyncio.to_thread``). It reads the sandbox's row with one query and reuses the stored
token while its PAT is live, its hash matches, and it is outside the renewal window.
Otherwise it mints in one write transaction: lock the row and check it is the version
the decision was made on, insert the new PAT and revoke the superseded one (one statement
on Postgres), and point the row at the new PAT, so the switch is atomic. On Postgres a
reuse is one statement in autocommit; a mint is four statements and one commit.

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
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, cast

from pydantic import SecretStr
from sqlalchemy import (
    Engine,
    Row,
    Select,
    Table,
    and_,
    bindparam,
    case,
    delete,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from craft_operator.config import EMBEDDED_CLUSTER_ID
from craft_operator.credentials.db import (
    WRITE_OPTION,
    create_credentials_engine,
    is_onyx_mode,
    is_retryable,
    is_unique_violation,
    translated_errors,
)
from craft_operator.credentials.errors import (
    CredentialsError,
    KeyRingError,
    UserInactiveError,
    UserNotFoundError,
)
from craft_operator.credentials.keyring import KeyRing, open_token, parse_header, seal_token
from craft_operator.credentials.tables import (
    OnyxUser,
    PersonalAccessToken,
    SandboxCredential,
)
from craft_operator.credentials.tokens import (
    CRAFT_SCOPES,
    PatType,
    display_form,
    generate_token,
    hash_token,
    pat_name,
)

log = logging.getLogger(__name__)

DEFAULT_LIFETIME = timedelta(hours=720)
DEFAULT_RENEWAL_FRACTION = 0.2
#: A stored PAT that outlives ``now + lifetime`` by more than this is replaced, so that a
#: shortened ``spec.credentials.lifetime`` takes effect.
_LIFETIME_SLACK = timedelta(minutes=5)
_MAX_ATTEMPTS = 8

_CRED = cast(Table, SandboxCredential.__table__)
_PAT = cast(Table, PersonalAccessToken.__table__)
_USER = cast(Table, OnyxUser.__table__)


def utc_now() -> datetime:
    """The current time, aware and in UTC (the store's default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class SandboxIdentity:
    """Which sandbox a credential belongs to: the CraftSandbox's namespace, name and uid."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"sandbox {self.namespace}/{self.name}"


@dataclass(frozen=True)
class IssuedCredential:
    """The sandbox's current PAT, as :meth:`CredentialStore.ensure` returns it.

    ``token`` is a :class:`SecretStr`: its repr and str are masked; call
    ``token.get_secret_value()`` only to write the Kubernetes Secret.
    """

    token: SecretStr = field(repr=False)
    pat_id: int
    token_display: str
    created_at: datetime
    expires_at: datetime
    minted: bool
    superseded_pat_id: int | None = None
    #: Why a new PAT was minted (``None`` when the stored one was reused).
    reason: str | None = None


#: How a mint's reason starts when the stored token could not be decrypted.
UNDECRYPTABLE = "the stored token cannot be decrypted with the key ring"


class PatState(StrEnum):
    """The state of the PAT a stored credential points to."""

    LIVE = "live"
    REVOKED = "revoked"
    EXPIRED = "expired"
    MISSING = "missing"


@dataclass(frozen=True)
class CredentialInfo:
    """What is stored for a sandbox, without the token (for ``credentials show``)."""

    namespace: str
    name: str
    sandbox_uid: str
    user_id: str
    tenant_id: str
    pat_id: int
    token_display: str
    key_id: str
    created_at: datetime
    expires_at: datetime
    pat_state: PatState


@dataclass(frozen=True)
class RotationResult:
    """What :meth:`CredentialStore.rotate` did."""

    key_id: str
    changed: int
    failures: tuple[str, ...] = ()


class _LostRaceError(Exception):
    """Another writer changed the row between our read and our write; try again."""


def _parse_user_id(user_id: str | uuid.UUID, identity: SandboxIdentity) -> uuid.UUID:
    if isinstance(user_id, uuid.UUID):
        return user_id
    try:
        return uuid.UUID(user_id)
    except ValueError:
        raise UserNotFoundError(f"{identity}: user id {user_id!r} is not a UUID") from None


def _pat_state(row: Row[Any], now: datetime) -> PatState:
    if row.pat_hash is None:
        return PatState.MISSING
    if row.pat_revoked:
        return PatState.REVOKED
    if row.pat_expires_at is not None and row.pat_expires_at <= now:
        return PatState.EXPIRED
    return PatState.LIVE


def revoke_pat_statement(pat_id: int, now: datetime) -> Any:
    """Onyx's revocation: ``is_revoked`` true and ``expires_at`` now (never later)."""
    moment = literal(now, _PAT.c.expires_at.type)
    return (
        update(_PAT)
        .where(_PAT.c.id == pat_id, _PAT.c.is_revoked.is_(False))
        .values(
            is_revoked=True,
            expires_at=case(
                (_PAT.c.expires_at.is_(None) | (_PAT.c.expires_at > moment), moment),
                else_=_PAT.c.expires_at,
            ),
        )
    )


@dataclass(frozen=True)
class EnsurePolicy:
    """What one :meth:`CredentialStore.ensure` call asks for."""

    identity: SandboxIdentity
    user_id: uuid.UUID
    tenant_id: str
    lifetime: timedelta
    renewal_fraction: float = DEFAULT_RENEWAL_FRACTION
    force_new: bool = False
    rejected_pat_id: int | None = None


def replacement_reason(row: Row[Any] | None, policy: EnsurePolicy, now: datetime) -> str | None:
    """Why the stored credential cannot be reused, or ``None`` if it can (pure)."""
    if row is None:
        return "no credential stored"
    if policy.force_new:
        return "a new PAT was requested"
    if policy.rejected_pat_id is not None and row.pat_id == policy.rejected_pat_id:
        return f"PAT {policy.rejected_pat_id} was rejected"
    if row.sandbox_uid != policy.identity.uid:
        return "the credential belongs to an earlier sandbox of that name"
    if row.user_id != policy.user_id:
        return "the sandbox's user changed"
    if row.tenant_id != policy.tenant_id:
        return "the sandbox's tenant changed"
    state = _pat_state(row, now)
    if state is not PatState.LIVE:
        return f"the PAT is {state.value}"
    expires_at: datetime | None = row.pat_expires_at
    if expires_at is None:
        return "the PAT never expires"
    remaining = expires_at - now
    if remaining < policy.lifetime * policy.renewal_fraction:
        return "the PAT is inside its renewal window"
    if remaining > policy.lifetime + _LIFETIME_SLACK:
        return "the PAT outlives the sandbox's credential lifetime"
    return None


class CredentialStore:
    """Mints, reuses, revokes and shows sandbox PATs. Thread-safe; blocking (use a thread).

    ``engine_or_url`` is an engine or a SQLAlchemy URL; :meth:`close` disposes an engine
    made from a URL, or a given one when ``owns_engine`` is true. The schema must already
    be in place: see :func:`craft_operator.credentials.factory.build_credential_store`.
    """

    def __init__(
        self,
        engine_or_url: Engine | str | URL,
        keyring: KeyRing,
        *,
        renewal_fraction: float = DEFAULT_RENEWAL_FRACTION,
        clock: Callable[[], datetime] = utc_now,
        owns_engine: bool = False,
        cluster_id: str = EMBEDDED_CLUSTER_ID,
    ) -> None:
        if not 0 <= renewal_fraction < 1:
            raise ValueError("renewal_fraction must be in [0, 1)")
        if isinstance(engine_or_url, Engine):
            self._engine, self._owns_engine = engine_or_url, owns_engine
        else:
            self._engine, self._owns_engine = create_credentials_engine(engine_or_url), True
        self._keyring = keyring
        self._renewal_fraction = renewal_fraction
        self._clock = clock
        if not cluster_id:
            raise ValueError("cluster_id must not be empty")
        #: The only rows this store reads or writes; written on every row it mints.
        self.cluster_id = cluster_id
        self._onyx_mode = is_onyx_mode(self._engine)
        # Reads need no transaction: on Postgres they run in autocommit (one round trip).
        self._reader = (
            self._engine.execution_options(isolation_level="AUTOCOMMIT")
            if self._onyx_mode
            else self._engine
        )
        self._writer = self._engine.execution_options(**{WRITE_OPTION: True})
        self._read_current = self._current_row_query(lock=False)
        self._lock_current = self._current_row_query(lock=True)
        self._lock_version = (
            select(_CRED.c.version).where(_CRED.c.id == bindparam("row_id")).with_for_update()
        )
        self._read_unclaimed = select(
            _CRED.c.id, _CRED.c.version, _CRED.c.sandbox_uid, _CRED.c.encrypted_token
        ).where(
            _CRED.c.cluster_id.is_(None),
            _CRED.c.namespace == bindparam("namespace"),
            _CRED.c.name == bindparam("name"),
        )

    def __repr__(self) -> str:
        return (
            f"CredentialStore(dialect={self._engine.dialect.name!r}, "
            f"cluster_id={self.cluster_id!r}, keyring={self._keyring!r}, "
            f"renewal_fraction={self._renewal_fraction})"
        )

    @property
    def engine(self) -> Engine:
        """The engine the store uses."""
        return self._engine

    @property
    def onyx_mode(self) -> bool:
        """True on Onyx's Postgres, False on the embedded SQLite database."""
        return self._onyx_mode

    @property
    def keyring(self) -> KeyRing:
        """The key ring that encrypts and decrypts stored tokens."""
        return self._keyring

    def close(self) -> None:
        """Release the database connections if the store created its own engine."""
        if self._owns_engine:
            self._engine.dispose()

    # -- queries ---------------------------------------------------------------------

    def _current_row_query(self, *, lock: bool) -> Select[Any]:
        columns: list[Any] = [
            _CRED.c.id,
            _CRED.c.version,
            _CRED.c.namespace,
            _CRED.c.name,
            _CRED.c.sandbox_uid,
            _CRED.c.user_id,
            _CRED.c.tenant_id,
            _CRED.c.pat_id,
            _CRED.c.token_display,
            _CRED.c.encrypted_token,
            _CRED.c.key_id,
            _CRED.c.created_at,
            _CRED.c.expires_at,
            _PAT.c.hashed_token.label("pat_hash"),
            _PAT.c.is_revoked.label("pat_revoked"),
            _PAT.c.expires_at.label("pat_expires_at"),
        ]
        joined = _CRED.outerjoin(_PAT, _PAT.c.id == _CRED.c.pat_id)
        if self._onyx_mode:
            columns.append(_USER.c.is_active.label("user_active"))
            joined = joined.outerjoin(
                _USER, _USER.c.id == bindparam("user_id", type_=_USER.c.id.type)
            )
        query = (
            select(*columns)
            .select_from(joined)
            .where(
                _CRED.c.cluster_id == bindparam("cluster_id"),
                _CRED.c.namespace == bindparam("namespace"),
                _CRED.c.name == bindparam("name"),
            )
        )
        return query.with_for_update(of=_CRED) if lock else query

    def _fetch(
        self,
        connection: Connection,
        query: Select[Any],
        namespace: str,
        name: str,
        user_id: uuid.UUID | None = None,
    ) -> Row[Any] | None:
        params: dict[str, Any] = {
            "cluster_id": self.cluster_id,
            "namespace": namespace,
            "name": name,
        }
        if self._onyx_mode:
            params["user_id"] = user_id
        return connection.execute(query, params).one_or_none()

    # -- ensure ----------------------------------------------------------------------

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
        """Return the sandbox's live PAT, minting (and revoking the old one) when needed.

        ``force_new`` always mints. ``rejected_pat_id`` mints unless the stored PAT is
        already another one: the reconciler passes the id of a PAT the server refused, and
        concurrent callers do not replace a PAT that a sibling has just minted.

        Raises :class:`UserNotFoundError`, :class:`UserInactiveError`,
        :class:`DecryptionError` / :class:`KeyRingError` (naming the key id and sandbox),
        :class:`DatabaseUnavailableError` or :class:`SchemaMissingError`.
        """
        if lifetime <= timedelta(0):
            raise ValueError("lifetime must be positive")
        user_uuid = _parse_user_id(user_id, identity)
        policy = EnsurePolicy(
            identity=identity,
            user_id=user_uuid,
            tenant_id=tenant_id,
            lifetime=lifetime,
            renewal_fraction=self._renewal_fraction,
            force_new=force_new,
            rejected_pat_id=rejected_pat_id,
        )
        for _attempt in range(_MAX_ATTEMPTS):
            with translated_errors(f"ensuring the PAT of {identity}"):
                with self._reader.connect() as connection:
                    row = self._fetch(
                        connection,
                        self._read_current,
                        identity.namespace,
                        identity.name,
                        user_uuid,
                    )
                if row is None and self._claim_unclaimed(identity):
                    continue
                self._check_user(row, identity)
                reason = replacement_reason(row, policy, self._clock())
                if reason is None:
                    assert row is not None
                    try:
                        issued = self._reuse(row, identity)
                    except KeyRingError as exc:
                        # Its key left the ring, or the envelope was altered: the token is
                        # lost to us, so its PAT is revoked and replaced now, not at renewal.
                        log.warning("%s; revoking PAT %s and minting a new one", exc, row.pat_id)
                        issued, reason = None, f"{UNDECRYPTABLE}: {exc}"
                    if issued is not None:
                        return issued
                    reason = reason or "the stored token does not match its PAT"
                try:
                    return self._mint(policy, row, reason)
                except _LostRaceError:
                    continue
                except IntegrityError as exc:
                    if is_unique_violation(exc):
                        continue
                    raise
                except DBAPIError as exc:
                    if is_retryable(exc):
                        continue
                    raise
        raise CredentialsError(
            f"{identity}: gave up after {_MAX_ATTEMPTS} attempts: other writers kept changing "
            "the credential"
        )

    def _claim_unclaimed(self, identity: SandboxIdentity) -> bool:
        """Claim the sandbox's row from before cluster ids if it proves to be this
        cluster's (see the module); True when the caller should read again.

        Another cluster's row (another uid, or a token this key ring cannot open for this
        uid) is left exactly as it is: neither reused nor revoked.
        """
        with self._reader.connect() as connection:
            row = connection.execute(
                self._read_unclaimed, {"namespace": identity.namespace, "name": identity.name}
            ).first()
        if row is None or row.sandbox_uid != identity.uid:
            return False
        try:
            open_token(
                self._keyring, row.encrypted_token, sandbox_uid=identity.uid, subject=str(identity)
            )
        except CredentialsError:
            return False
        try:
            with self._writer.begin() as connection:
                claimed = connection.execute(
                    update(_CRED)
                    .where(
                        _CRED.c.id == row.id,
                        _CRED.c.version == row.version,
                        _CRED.c.cluster_id.is_(None),
                    )
                    .values(cluster_id=self.cluster_id, version=row.version + 1)
                ).rowcount
        except IntegrityError as exc:
            if is_unique_violation(exc):  # this cluster's row appeared meanwhile
                return True
            raise
        if claimed:
            log.info("%s: claimed its credential row from before cluster ids", identity)
        return True

    def _check_user(self, row: Row[Any] | None, identity: SandboxIdentity) -> None:
        if self._onyx_mode and row is not None and row.user_active is False:
            raise UserInactiveError(f"{identity}: user {row.user_id} is inactive in Onyx")

    def _reuse(self, row: Row[Any], identity: SandboxIdentity) -> IssuedCredential | None:
        token = open_token(
            self._keyring, row.encrypted_token, sandbox_uid=identity.uid, subject=str(identity)
        )
        if hash_token(token) != row.pat_hash:
            log.warning(
                "%s: the stored token does not match PAT %s; minting a new one",
                identity,
                row.pat_id,
            )
            return None
        return IssuedCredential(
            token=token,
            pat_id=row.pat_id,
            token_display=row.token_display,
            created_at=row.created_at,
            expires_at=row.expires_at,
            minted=False,
        )

    def _mint(self, policy: EnsurePolicy, row: Row[Any] | None, reason: str) -> IssuedCredential:
        """Replace the credential read as ``row`` (None: there was none) with a new PAT.

        Raises :class:`_LostRaceError` (or a unique violation) when another writer changed
        the credential since ``row`` was read; the caller reads again and decides again.
        """
        identity, user_id = policy.identity, policy.user_id
        with self._writer.begin() as connection:
            if row is not None:
                # Lock the row and check it is still the one we decided on. (Re-reading the
                # joined PAT under the lock would not do: in READ COMMITTED the lock returns
                # the row's newest version but joins it to rows of the statement's snapshot.)
                locked = connection.execute(
                    self._lock_version, {"row_id": row.id}
                ).scalar_one_or_none()
                if locked != row.version:
                    raise _LostRaceError
            now = self._clock()
            token = generate_token(policy.tenant_id)
            expires_at = now + policy.lifetime
            # Only a PAT that still exists can be superseded (and revoked).
            superseded = None if row is None or row.pat_hash is None else row.pat_id
            pat_id = self._insert_pat(
                connection, identity, user_id, token, now, expires_at, superseded
            )
            envelope = seal_token(self._keyring, token, sandbox_uid=identity.uid)
            values: dict[str, Any] = {
                "sandbox_uid": identity.uid,
                "user_id": user_id,
                "tenant_id": policy.tenant_id,
                "pat_id": pat_id,
                "token_display": display_form(token),
                "encrypted_token": envelope,
                "key_id": self._keyring.current_key_id,
                "created_at": now,
                "expires_at": expires_at,
                "updated_at": now,
                "cluster_id": self.cluster_id,
            }
            if row is None:
                connection.execute(
                    insert(_CRED).values(
                        namespace=identity.namespace, name=identity.name, version=1, **values
                    )
                )
            else:
                result = connection.execute(
                    update(_CRED)
                    .where(_CRED.c.id == row.id, _CRED.c.version == row.version)
                    .values(version=row.version + 1, **values)
                )
                if result.rowcount != 1:
                    raise _LostRaceError
        log.info(
            "%s: minted PAT %s (%s), expires %s%s",
            identity,
            pat_id,
            reason,
            expires_at.isoformat(),
            f"; revoked PAT {superseded}" if superseded is not None else "",
        )
        return IssuedCredential(
            token=token,
            pat_id=pat_id,
            token_display=display_form(token),
            created_at=now,
            expires_at=expires_at,
            minted=True,
            superseded_pat_id=superseded,
            reason=reason,
        )

    def _revoke_statement(self, pat_id: int, now: datetime) -> Any:
        return revoke_pat_statement(pat_id, now)

    def _insert_pat(
        self,
        connection: Connection,
        identity: SandboxIdentity,
        user_id: uuid.UUID,
        token: SecretStr,
        now: datetime,
        expires_at: datetime,
        superseded: int | None,
    ) -> int:
        values: dict[str, Any] = {
            "name": pat_name(identity.namespace, identity.name),
            "hashed_token": hash_token(token),
            "token_display": display_form(token),
            "user_id": user_id,
            "expires_at": expires_at,
            "created_at": now,
            "is_revoked": False,
            "pat_type": PatType.CRAFT,
            "scopes": list(CRAFT_SCOPES),
        }
        if not self._onyx_mode:
            if superseded is not None:
                connection.execute(self._revoke_statement(superseded, now))
            result = connection.execute(insert(_PAT).values(**values).returning(_PAT.c.id))
            return int(result.scalar_one())
        # One statement on Postgres: revoke the superseded PAT (a data-modifying CTE) and
        # insert the new one only if the user exists and is active.
        source = select(*(literal(value, _PAT.c[key].type) for key, value in values.items())).where(
            and_(_USER.c.id == user_id, _USER.c.is_active.is_(True))
        )
        statement = insert(_PAT).from_select(list(values), source).returning(_PAT.c.id)
        if superseded is not None:
            revoked = self._revoke_statement(superseded, now).returning(_PAT.c.id)
            statement = statement.add_cte(revoked.cte("superseded"))
        pat_id = connection.execute(statement).scalar_one_or_none()
        if pat_id is None:
            active = connection.execute(
                select(_USER.c.is_active).where(_USER.c.id == user_id)
            ).scalar_one_or_none()
            if active is None:
                raise UserNotFoundError(f"{identity}: user {user_id} does not exist in Onyx")
            raise UserInactiveError(f"{identity}: user {user_id} is inactive in Onyx")
        return int(pat_id)

    # -- revoke and show -------------------------------------------------------------

    def revoke(self, identity: SandboxIdentity) -> bool:
        """Revoke the sandbox's PAT and forget its token; False if none was stored.

        Idempotent. Matches this cluster's row by namespace and name whatever its uid: a
        row with another uid is an orphan of an earlier object of that name and must go
        too. A row from before cluster ids goes only if it proves to be this sandbox's.
        """
        with translated_errors(f"revoking the PAT of {identity}"):
            revoked = self.revoke_named(identity.namespace, identity.name) is not None
            if self._claim_unclaimed(identity):
                revoked = (
                    self.revoke_named(identity.namespace, identity.name) is not None or revoked
                )
        return revoked

    def revoke_named(self, namespace: str, name: str) -> CredentialInfo | None:
        """Revoke this cluster's row by namespace and name (for the CLI); returns what was
        revoked, if any."""
        subject = f"sandbox {namespace}/{name}"
        with (
            translated_errors(f"revoking the PAT of {subject}"),
            self._writer.begin() as connection,
        ):
            row = self._fetch(connection, self._lock_current, namespace, name)
            if row is None:
                return None
            now = self._clock()
            info = self._info(row, now)
            connection.execute(self._revoke_statement(row.pat_id, now))
            connection.execute(delete(_CRED).where(_CRED.c.id == row.id))
        log.info("%s: revoked PAT %s", subject, row.pat_id)
        return info

    def show(self, namespace: str, name: str) -> CredentialInfo | None:
        """What this cluster stores for a sandbox (never the token), or None."""
        with (
            translated_errors(f"reading the credential of sandbox {namespace}/{name}"),
            self._reader.connect() as connection,
        ):
            row = self._fetch(connection, self._read_current, namespace, name)
        return None if row is None else self._info(row, self._clock())

    @staticmethod
    def _info(row: Row[Any], now: datetime) -> CredentialInfo:
        return CredentialInfo(
            namespace=row.namespace,
            name=row.name,
            sandbox_uid=row.sandbox_uid,
            user_id=str(row.user_id),
            tenant_id=row.tenant_id,
            pat_id=row.pat_id,
            token_display=row.token_display,
            key_id=row.key_id,
            created_at=row.created_at,
            expires_at=row.expires_at,
            pat_state=_pat_state(row, now),
        )

    # -- key rotation ----------------------------------------------------------------

    def rotate(
        self,
        *,
        batch_size: int = 100,
        progress: Callable[[int], None] | None = None,
    ) -> RotationResult:
        """Re-encrypt every token this cluster stores under the current key, one batch per
        transaction. Other clusters' rows, and rows from before cluster ids, are left alone
        (another cluster's key ring may lack this one's current key).

        Safe to interrupt and run again: each batch commits on its own, and rows already
        under the current key are skipped. Rows that fail to decrypt are reported in
        ``failures`` and left alone. ``progress`` is called with the running count after
        each committed batch.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        current = self._keyring.current_key_id
        changed, last_id, failures = 0, 0, list[str]()
        while True:
            batch = self._rotate_batch(current, after_id=last_id, batch_size=batch_size)
            if batch is None:
                return RotationResult(current, changed, tuple(failures))
            batch_changed, last_id, batch_failures = batch
            changed += batch_changed
            failures += batch_failures
            if progress is not None:
                progress(changed)

    def _rotate_batch(
        self, current: str, *, after_id: int, batch_size: int
    ) -> tuple[int, int, list[str]] | None:
        """Re-encrypt one batch in one transaction; None when no rows are left."""
        changed, failures = 0, list[str]()
        with (
            translated_errors("rotating the credential encryption key"),
            self._writer.begin() as connection,
        ):
            rows = connection.execute(
                select(
                    _CRED.c.id,
                    _CRED.c.namespace,
                    _CRED.c.name,
                    _CRED.c.sandbox_uid,
                    _CRED.c.encrypted_token,
                )
                .where(
                    _CRED.c.cluster_id == self.cluster_id,
                    _CRED.c.key_id != current,
                    _CRED.c.id > after_id,
                )
                .order_by(_CRED.c.id)
                .limit(batch_size)
                .with_for_update(skip_locked=True)
            ).all()
            if not rows:
                return None
            for row in rows:
                subject = f"sandbox {row.namespace}/{row.name}"
                try:
                    token = open_token(
                        self._keyring,
                        row.encrypted_token,
                        sandbox_uid=row.sandbox_uid,
                        subject=subject,
                    )
                except CredentialsError as exc:
                    failures.append(str(exc))
                    continue
                connection.execute(
                    update(_CRED)
                    .where(_CRED.c.id == row.id)
                    .values(
                        encrypted_token=seal_token(
                            self._keyring, token, sandbox_uid=row.sandbox_uid
                        ),
                        key_id=current,
                        version=_CRED.c.version + 1,
                        updated_at=self._clock(),
                    )
                )
                changed += 1
        return changed, int(rows[-1].id), failures

    def key_ids_in_use(self) -> dict[str, int]:
        """How many of this cluster's stored tokens each key id encrypts (read from the
        envelopes' key id)."""
        counts: dict[str, int] = {}
        query = select(_CRED.c.encrypted_token).where(_CRED.c.cluster_id == self.cluster_id)
        with (
            translated_errors("counting stored tokens by key"),
            self._reader.connect() as connection,
        ):
            for (envelope,) in connection.execute(query):
                key_id, _ = parse_header(envelope, subject="a stored credential")
                counts[key_id] = counts.get(key_id, 0) + 1
        return counts

"""Adapters from the domain services to the reconciler's ports.

- :class:`StoreCredentials`: the (blocking) credential store, off the event loop in a
  bounded pool of its own threads, each call bounded in time, with a memory so that the
  passes between two resyncs (the idle check's, a pod's events) do not query the database:
  an unchanged sandbox's PAT is read about once per CRAFT_RESYNC_INTERVAL.
- :class:`~craft_operator.reconciler.skill_renderer.SkillRenderer` (in its own module):
  renders SKILL.md.
- :class:`LibrarySyncer`: syncs a user library from S3 into a pod over exec, with one S3
  client per endpoint, planned from the operator's record in the credentials database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from craft_operator.api.models import ANNOTATION_PAT_REVOKED, CraftSandbox
from craft_operator.builders.naming import SANDBOX_CONTAINER
from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError, DatabaseUnavailableError
from craft_operator.credentials.model import (
    IssuedCredential,
    Revocation,
    SandboxIdentity,
    renewal_due_at,
)
from craft_operator.daemon_threads import DaemonThreadPool
from craft_operator.kube.exec import ExecTransport
from craft_operator.library import (
    DestinationError,
    LibraryLocation,
    S3ObjectStore,
    SyncResult,
    caps_from_settings,
    make_s3_store,
    sync_user_library_exec,
)
from craft_operator.library.record import SyncRecord
from craft_operator.reconciler.pod_guard import GuardedExec

if TYPE_CHECKING:
    # The store and its records bring SQLAlchemy and Alembic (about 23 MiB): imported when
    # the store is opened, on the first sandbox, not by an operator that is only watching.
    from sqlalchemy import Engine

    from craft_operator.credentials.store import CredentialStore

_T = TypeVar("_T")
_P = ParamSpec("_P")

log = logging.getLogger(__name__)

#: Threads that run the credential store's (blocking) database calls: never more, however
#: many calls a silent database leaves hanging (the calls beyond wait their turn).
DATABASE_THREADS = 8
#: How long a pass waits for a database call (its turn, the store's opening, the call)
#: before it fails with :class:`DatabaseUnavailableError`, to be retried with backoff.
DATABASE_CALL_TIMEOUT_S = 60.0
#: The share of the recheck interval for which a checked PAT is reused: a little under the
#: whole, so that the pass the reconciler makes when the interval is up always reads,
#: whatever the slewing of the wall clock against the work queue's timers.
REUSE_SHARE = 0.99
#: The shortest memory of a checked PAT: a CRAFT_RESYNC_INTERVAL set lower (for drift,
#: say) does not have every sandbox's PAT read from the database that often too.
MIN_RECHECK_S = 60.0


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def _identity(
    namespace: str, name: str, uid: str, created_at: datetime | None = None
) -> SandboxIdentity:
    return SandboxIdentity(namespace=namespace, name=name, uid=uid, created_at=created_at)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """What the database said of a sandbox's PAT, and under what it was asked."""

    issued: IssuedCredential
    #: The monotonic clock when it was asked: the memory ages on it, so a wall clock
    #: stepped back (NTP, a restored VM) neither keeps a PAT from being read again nor
    #: delays the read.
    ticks: float
    #: When the PAT is due for renewal (``None``: it does not expire).
    renew_at: datetime | None
    #: The sandbox's ``craft.onyx.app/pat-revoked`` annotation then.
    revoked: str | None
    #: The sandbox's ``spec.credentials.lifetime`` then.
    lifetime: timedelta


class StoreCredentials:
    """The credential store as the reconciler's ``CredentialsPort``.

    A sandbox's PAT is read from the database at least every ``recheck_interval`` seconds
    (the operator's CRAFT_RESYNC_INTERVAL): one checked less than :data:`REUSE_SHARE` of it
    ago (and not yet inside its renewal window) is reused without a database round trip,
    carrying the moment it is read again (``recheck_at``), by which the reconciler comes
    back. A revocation made out of band (or a user made inactive in Onyx) is therefore
    noticed within that interval, however often passes come meanwhile; at once if the
    sandbox's ``craft.onyx.app/pat-revoked`` annotation (``credentials revoke`` sets it) or
    its ``spec.credentials.lifetime`` changed since. A remembered PAT in its grace period is
    dropped once its grace is over, or when :meth:`retire` revokes it.

    The (blocking) database calls run in a pool of at most ``threads`` daemon threads of
    their own, named ``craft-db-N``, and each call, the store's opening included, fails with
    :class:`DatabaseUnavailableError` after ``call_timeout`` seconds. A database that never
    answers therefore costs a pass a minute, not a reconcile worker for ever; the threads it
    holds stay within the pool's bound, and neither the default executor nor the exit wait
    for them. An opening still pending after ``opening_bound`` seconds (twice the call
    timeout unless given: a migration waiting on a lock) is abandoned, and the next call
    opens afresh; the abandoned one's store, should it ever open, is closed, never used.
    """

    def __init__(
        self,
        store: CredentialStore | Callable[[], CredentialStore],
        *,
        renewal_fraction: float = 0.2,
        recheck_interval: float = 300.0,
        clock: Callable[[], datetime] = _wall_clock,
        ticks: Callable[[], float] | None = None,
        call_timeout: float = DATABASE_CALL_TIMEOUT_S,
        threads: int = DATABASE_THREADS,
        opening_bound: float | None = None,
    ) -> None:
        self._store: CredentialStore | None = None
        self._factory: Callable[[], CredentialStore] | None = None
        if callable(store):  # a factory; a store is not callable
            self._factory = store
        else:
            self._store = store
        self._opening: asyncio.Future[CredentialStore] | None = None
        self._opening_work: concurrent.futures.Future[CredentialStore] | None = None
        self._opening_since = 0.0
        self._calls: asyncio.Semaphore | None = None
        self._threads = DaemonThreadPool(threads, name="craft-db")
        self._call_timeout = call_timeout
        #: How long a revoke waits for a call of its sandbox that still runs (a database
        #: that holds a lock for ever must not hold a deletion for ever).
        self._revoke_wait = 5 * call_timeout
        self._opening_bound = 2 * call_timeout if opening_bound is None else opening_bound
        self._closed = False
        self._renewal_fraction = renewal_fraction
        self._recheck = recheck_interval
        self._reuse = recheck_interval * REUSE_SHARE
        self._clock = clock
        # A clock of the tests' own moves the memory's age too, unless they give ticks.
        self._ticks = ticks or (
            time.monotonic if clock is _wall_clock else lambda: clock().timestamp()
        )
        #: Per sandbox uid: the last check of its PAT.
        self._known: dict[str, _Checked] = {}
        #: Database calls still running per sandbox uid, those whose pass gave up on them
        #: (past the call timeout) included: their writes may still land.
        self._running: dict[str, list[float]] = {}  # uid: when each such call began
        self._running_lock = threading.Lock()
        self.database_calls = 0

    @classmethod
    def for_settings(
        cls,
        settings: Settings,
        store: CredentialStore | Callable[[], CredentialStore],
        *,
        clock: Callable[[], datetime] = _wall_clock,
    ) -> StoreCredentials:
        """The adapter as the operator runs it: PATs renewed by CRAFT_CREDENTIAL_RENEWAL_FRACTION
        and read from the database once per CRAFT_RESYNC_INTERVAL (the interval README
        promises an out-of-band revocation is noticed within), but not more often than
        once a minute (:data:`MIN_RECHECK_S`)."""
        return cls(
            store,
            renewal_fraction=settings.credential_renewal_fraction,
            recheck_interval=max(settings.resync_interval, MIN_RECHECK_S),
            clock=clock,
        )

    async def forget_all(self) -> None:
        """The replica stands by: the PATs it remembers may be renewed and retired by the
        other replica meanwhile, so each is read from the database again when active."""
        self._known.clear()

    async def _opened(self) -> CredentialStore:
        """The store, opened on first use: a database that is down at start-up is then a
        condition on each sandbox (retried), not an operator that fails to start.

        Passes that need the store meanwhile wait for the one opening under way, each
        within its own bound; a failed opening is tried again by the next call, and so is
        one pending for longer than the opening bound. A pass whose opening was abandoned
        (or cancelled) meanwhile goes on to the current one, never to the abandoned one's
        store.
        """
        while self._store is None:
            opening = self._current_opening()
            await asyncio.wait([opening])  # a timed-out pass leaves the opening running
            if not opening.cancelled():
                opening.result()  # its error, if it failed; its store is kept by settling
        return self._store

    def _current_opening(self) -> asyncio.Future[CredentialStore]:
        """The opening under way, or a new one if there is none or it is overdue."""
        loop = asyncio.get_running_loop()
        if self._opening is not None and loop.time() - self._opening_since > self._opening_bound:
            self._abandon_opening()
        if self._opening is None:
            assert self._factory is not None
            if self._closed:
                raise DatabaseUnavailableError("the credential store is closed: the operator stops")
            work = self._threads.submit(self._factory)
            self._opening, self._opening_work = asyncio.wrap_future(work), work
            self._opening_since = loop.time()
            self._opening.add_done_callback(self._settle_opening)
        return self._opening

    def _abandon_opening(self) -> None:
        """Give up on the opening under way (its thread hangs): unless it is still queued
        (then it never runs), the store it opens, if it ever does, is closed in its thread."""
        work = self._opening_work
        self._opening = self._opening_work = None
        log.warning(
            "opening the credential store took over %g s: abandoned, opening it afresh",
            self._opening_bound,
        )
        if work is not None and not work.cancel():
            work.add_done_callback(_close_abandoned)

    def _settle_opening(self, opening: asyncio.Future[CredentialStore]) -> None:
        """Keep the opened store (closed at once if :meth:`close` came first), or forget
        the failed opening so that the next call tries again. An abandoned opening's
        outcome is not this one's: see :meth:`_abandon_opening`."""
        failed = opening.cancelled() or opening.exception() is not None
        if opening is not self._opening:
            return
        self._opening = self._opening_work = None
        if failed:
            return
        self._store = opening.result()
        if self._closed:
            self._store.close()

    def _slots(self, store: CredentialStore) -> asyncio.Semaphore:
        # SQLite has one writer at a time: threads racing for its lock spend their time in
        # its busy handler's sleeps. Queue them here instead; Postgres takes several.
        if self._calls is None:
            self._calls = asyncio.Semaphore(8 if store.onyx_mode else 1)
        return self._calls

    def _in_thread(self, function: Callable[[], _T]) -> asyncio.Future[_T]:
        """``function()`` in one of the database threads."""
        if self._closed:
            raise DatabaseUnavailableError("the credential store is closed: the operator stops")
        return asyncio.get_running_loop().run_in_executor(self._threads, function)

    async def _bounded(
        self, subject: str, use: Callable[[CredentialStore], _T], *, uid: str | None = None
    ) -> _T:
        """``use(store)`` in a database thread, within the store's call slots and the call
        timeout; ``subject`` says what was done, for the error. A call for sandbox ``uid``
        is counted while its thread runs, even after the pass gave up waiting for it."""
        scope = asyncio.timeout(self._call_timeout)
        try:
            async with scope:
                store = await self._opened()
                async with self._slots(store):
                    call = functools.partial(use, store)
                    if uid:
                        call = functools.partial(self._counted, uid, call)
                    return await self._in_thread(call)
        except TimeoutError:
            if not scope.expired():
                raise  # the call's own, not the bound's
            raise DatabaseUnavailableError(
                f"{subject}: the credentials database did not answer within "
                f"{self._call_timeout:g} s (retried)"
            ) from None

    def _counted(self, uid: str, call: Callable[[], _T]) -> _T:
        """``call()``, recorded in :attr:`_running` for ``uid`` while it runs (in its
        thread: a call still queued when its pass gave up is cancelled and never runs)."""
        began = time.monotonic()
        with self._running_lock:
            self._running.setdefault(uid, []).append(began)
        try:
            return call()
        finally:
            with self._running_lock:
                calls = self._running[uid]
                calls.remove(began)
                if not calls:
                    del self._running[uid]

    def _ages(self, uid: str) -> tuple[float, float] | None:
        """How long the oldest and the youngest call for ``uid`` still running have run
        (seconds), if any runs: each may still land (none starts once the sandbox is being
        deleted)."""
        with self._running_lock:
            calls = self._running.get(uid)
            if not calls:
                return None
            now = time.monotonic()
            return now - min(calls), now - max(calls)

    def _one_call_at_a_time(self, subject: str, uid: str) -> None:
        """Raise :class:`DatabaseUnavailableError` (retried) while an earlier call for ``uid``
        still runs in the database after its pass gave up on it: each retry would take
        another of the threads every sandbox shares, all waiting on the same row. (Calls
        its passes still wait for may overlap: a delivery running on retires a PAT while
        the next pass ensures one.)"""
        ages = self._ages(uid)
        if ages is not None and ages[0] >= self._call_timeout:
            raise DatabaseUnavailableError(
                f"{subject}: an earlier call for this sandbox has run in the credentials "
                f"database for {ages[0]:.0f} s (retried once it ends)"
            )

    def close(self) -> None:
        """Release the database connections, and let the database threads go without
        waiting: queued calls are cancelled, and a thread stuck on a silent database is a
        daemon that holds neither the event loop's close nor the process's exit."""
        self._closed = True
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._store is not None:
            self._store.close()

    async def call(self, function: Callable[..., _T], *args: Any) -> _T:
        """``function(store, *args)`` in a database thread, within the store's call slots."""
        return await self._bounded(
            "querying the credentials database", lambda store: function(store, *args)
        )

    def forget(self, uid: str) -> None:
        """Drop the remembered PAT of sandbox ``uid`` (it is gone, or its PAT was revoked
        out of band)."""
        self._known.pop(uid, None)

    async def ensure(
        self, sandbox: CraftSandbox, *, rejected_pat_id: int | None = None
    ) -> IssuedCredential:
        """A live PAT for ``sandbox`` (see :meth:`CredentialStore.ensure`)."""
        uid = sandbox.metadata.uid or ""
        now = self._clock()
        revoked = sandbox.metadata.annotations.get(ANNOTATION_PAT_REVOKED)
        lifetime = sandbox.spec.credentials.lifetime
        known = self._known.get(uid)
        ticks = self._ticks()
        if (
            known is not None
            and rejected_pat_id is None
            and self._fresh(known, now, ticks, revoked, lifetime)
        ):
            left = timedelta(seconds=self._recheck - (ticks - known.ticks))
            return _reused(known.issued, now, recheck_at=now + left)
        identity = _identity(
            sandbox.metadata.namespace or "",
            sandbox.metadata.name,
            uid,
            sandbox.metadata.creation_timestamp,
        )
        self._one_call_at_a_time(f"ensuring the PAT of {identity.namespace}/{identity.name}", uid)
        self.database_calls += 1
        issued = await self._bounded(
            f"ensuring the PAT of {identity.namespace}/{identity.name}",
            lambda store: store.ensure(
                identity,
                user_id=sandbox.spec.user.id,
                tenant_id=sandbox.spec.user.tenant_id,
                lifetime=lifetime,
                rejected_pat_id=rejected_pat_id,
            ),
            uid=uid,
        )
        renew_at = (
            renewal_due_at(issued.expires_at, lifetime, self._renewal_fraction)
            if issued.expires_at
            else None
        )
        # Aged from the call's start: the database answered at some moment since.
        self._known[uid] = _Checked(issued, ticks, renew_at, revoked, lifetime)
        return dataclasses.replace(issued, recheck_at=now + timedelta(seconds=self._recheck))

    def _fresh(
        self,
        known: _Checked,
        now: datetime,
        ticks: float,
        revoked: str | None,
        lifetime: timedelta,
    ) -> bool:
        """Whether ``known`` may stand for a database read of the PAT now, for a sandbox
        whose ``pat-revoked`` annotation and lifetime are ``revoked`` and ``lifetime``."""
        return (
            # A revocation by hand is looked at at once, and so is a changed lifetime (a
            # shorter one may replace the PAT).
            known.revoked == revoked
            and known.lifetime == lifetime
            and 0.0 <= ticks - known.ticks < self._reuse
            and (known.renew_at is None or now < known.renew_at)
        )

    async def revoke(
        self, namespace: str, name: str, uid: str, *, created_at: datetime | None = None
    ) -> Revocation:
        """Revoke the sandbox's PAT (idempotent).

        Not while an earlier call for this sandbox still runs in the database after its
        pass gave up on it (:class:`DatabaseUnavailableError`, retried), for up to five call
        timeouts: an ensure that lands after the revoke would leave a PAT only the orphan
        sweep revokes, or take the row of a sandbox created later under the same name."""
        self._known.pop(uid, None)
        ages = self._ages(uid)
        running = ages[1] if ages is not None else None
        if running is not None and running < self._revoke_wait:
            raise DatabaseUnavailableError(
                f"revoking the PAT of {namespace}/{name}: an earlier call for this sandbox "
                f"still runs in the credentials database (retried once it ends, or after "
                f"{self._revoke_wait:g} s)"
            )
        if running is not None:
            log.warning(
                "revoking the PAT of %s/%s although a database call for it has run for %.0f "
                "s: a PAT it mints afterwards is revoked by the orphan sweep",
                namespace,
                name,
                running,
            )
        self.database_calls += 1
        identity = _identity(namespace, name, uid)
        return await self._bounded(
            f"revoking the PAT of {namespace}/{name}",
            lambda store: store.revoke(identity, created_at=created_at),
        )

    async def retire(self, namespace: str, name: str, uid: str, pat_id: int) -> int | None:
        """The pod now uses PAT ``pat_id``: revoke the one it superseded, if still in its
        grace period (see :meth:`CredentialStore.retire`); returns the revoked id."""
        subject = f"retiring the PAT that PAT {pat_id} of {namespace}/{name} superseded"
        self._one_call_at_a_time(subject, uid)
        self.database_calls += 1
        identity = _identity(namespace, name, uid)
        revoked = await self._bounded(
            subject,
            lambda store: store.retire(identity, pat_id),
            uid=uid,
        )
        known = self._known.get(uid)
        if known is not None and known.issued.pat_id == pat_id:
            retired = dataclasses.replace(known.issued, grace_pat_id=None, grace_expires_at=None)
            self._known[uid] = dataclasses.replace(known, issued=retired)
        return revoked

    async def in_database(self, call: Callable[[Engine], _T]) -> _T:
        """Run ``call`` with the credentials database's engine in a database thread, queued
        with the store's own calls (SQLite has one writer)."""
        self.database_calls += 1
        return await self._bounded(
            "querying the credentials database", lambda store: call(store.engine)
        )


def _close_abandoned(work: concurrent.futures.Future[CredentialStore]) -> None:
    """Close the store an abandoned opening opened after all (it was never used)."""
    if work.cancelled() or work.exception() is not None:
        return
    try:
        work.result().close()
    except Exception as exc:  # a callback's error would only be logged less clearly
        log.warning("closing the store of an abandoned opening failed: %s", exc)
    else:
        log.info("closed the credential store of an opening abandoned earlier")


def _reused(issued: IssuedCredential, now: datetime, *, recheck_at: datetime) -> IssuedCredential:
    """A remembered PAT as a reuse returns it: nothing minted, the PAT in its grace period
    only while it is live, and when it is read from the database again."""
    live = issued.grace_expires_at is not None and now < issued.grace_expires_at
    return dataclasses.replace(
        issued,
        minted=False,
        superseded_pat_id=None,
        reason=None,
        grace_pat_id=issued.grace_pat_id if live else None,
        grace_expires_at=issued.grace_expires_at if live else None,
        recheck_at=recheck_at,
    )


class DatabaseRecords:
    """One sandbox's library record in the credentials database (a ``RecordKeeper``)."""

    def __init__(self, database: StoreCredentials, namespace: str, name: str, uid: str) -> None:
        self._database = database
        self._namespace, self._name, self._uid = namespace, name, uid

    async def load(self) -> SyncRecord | None:
        """The record, if the operator synced this sandbox's library before."""
        from craft_operator.credentials import library_records

        try:
            return await self._database.in_database(
                functools.partial(library_records.load_record, sandbox_uid=self._uid)
            )
        except CredentialsError as exc:
            raise DestinationError(f"{exc}", retryable=True) from None

    async def save(self, record: SyncRecord) -> None:
        """Replace the record."""
        from craft_operator.credentials import library_records

        save = functools.partial(
            library_records.save_record,
            sandbox_uid=self._uid,
            namespace=self._namespace,
            name=self._name,
            record=record,
        )
        try:
            await self._database.in_database(save)
        except CredentialsError as exc:
            raise DestinationError(f"{exc}", retryable=True) from None


class LibrarySyncer:
    """Syncs user libraries into pods over exec (the reconciler's ``LibraryPort``).

    With ``records`` (the credentials database) each sync is planned from the operator's
    own record of what it synced; without, from the pod's manifest (capped).
    """

    def __init__(
        self,
        settings: Settings,
        exec_transport: ExecTransport,
        records: StoreCredentials | None = None,
    ) -> None:
        self._settings = settings
        self._exec = exec_transport
        self._records = records
        self._stores: dict[tuple[str | None, str | None], S3ObjectStore] = {}

    def _store(self, location: LibraryLocation) -> S3ObjectStore:
        key = (location.endpoint_url, location.region)
        if key not in self._stores:
            self._stores[key] = make_s3_store(
                endpoint_url=location.endpoint_url, region=location.region
            )
        return self._stores[key]

    async def sync(
        self,
        sandbox: CraftSandbox,
        location: LibraryLocation,
        *,
        namespace: str,
        pod: str,
        pod_uid: str = "",
        check: Callable[[], None] | None = None,
    ) -> SyncResult:
        """Make ``/workspace/user_library`` in the pod match the library in S3; ``check``
        runs before each exec (:mod:`craft_operator.reconciler.pod_guard`)."""
        library = sandbox.spec.user_library
        meta = sandbox.metadata
        records = (
            DatabaseRecords(self._records, meta.namespace or "", meta.name, meta.uid or "")
            if self._records is not None
            else None
        )
        return await sync_user_library_exec(
            store=self._store(location),
            bucket=location.bucket,
            prefix=location.prefix,
            exec_transport=self._exec if check is None else GuardedExec(self._exec, check),
            namespace=namespace,
            pod=pod,
            container=SANDBOX_CONTAINER,
            excludes=library.exclude,
            disabled=library.disabled_paths,
            caps=caps_from_settings(self._settings),
            timeout_seconds=self._settings.library_exec_timeout,
            manifest_max_bytes=self._settings.library_manifest_max_bytes,
            records=records,
            pod_uid=pod_uid,
        )

    async def close(self) -> None:
        """Close the S3 connections of the stores (at shutdown)."""
        for store in self._stores.values():
            await store.close()

    async def forget(self, uid: str) -> None:
        """Drop the record of a sandbox that is being deleted (idempotent)."""
        from craft_operator.credentials import library_records

        if self._records is not None:
            await self._records.in_database(
                functools.partial(library_records.delete_record, sandbox_uid=uid)
            )

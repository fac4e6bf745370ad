"""The orphan sweep: revoke PATs whose CraftSandbox no longer exists.

A sandbox's finalizer revokes its PAT, but a finalizer removed by hand, a namespace
deleted while the operator was down, or a database restored from a backup can leave a
credential row, and a live PAT, that no sandbox owns. The active replica sweeps as soon as
its cache is filled (at start, and on taking over once an interval has passed since its
last sweep), then every ``CRAFT_ORPHAN_SWEEP_INTERVAL`` seconds; a sweep that falls due
while the replica stands by or lists waits for the cache (looking every
:data:`SYNC_POLL` seconds), so that a replica restarted, or taking over, more often than
the interval still sweeps. Each sweep looks at the rows of its own cluster
(``CRAFT_CLUSTER_ID``) in the namespaces it serves:

- a row whose sandbox is in the watch cache with the row's uid is alive: no API call;
- any other row is confirmed with a live GET of the CraftSandbox: the API server's own
  404 for that CraftSandbox (its Status names the object), or an object with another uid,
  makes it an orphan; any other answer (a 404 from a proxy or for an unserved API
  version, forbidden, unreachable) leaves it for the next sweep, unless its namespace no
  longer exists (a live list says so): no sandbox can be in it (a namespace deleted with
  its sandboxes in it took the Role that let the operator read them);
- an orphan's PAT is revoked and its row deleted, with its library record, in one
  transaction, only if the row is unchanged since it was listed (a sandbox of that name
  created meanwhile wins);
- a row that fails (the database refused its revocation, say) is logged and counted, and
  the sweep goes on with the next.

Rows without a cluster id (from before the column existed) are only counted and logged.
PATs are named by id in logs, never by token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.model import Revocation
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import SANDBOXES, ApiError, Kind, NotFoundError
from craft_operator.kube.kinds import NAMESPACE, SANDBOX
from craft_operator.kube.namespaces import NamespaceLister, NamespaceState, namespace_state
from craft_operator.metrics import Metrics
from craft_operator.reconciler.services import StoreCredentials

if TYPE_CHECKING:
    from craft_operator.credentials.orphans import StoredCredential
    from craft_operator.credentials.store import CredentialStore

log = logging.getLogger(__name__)

#: Seconds between looks at whether the cache is filled, while a sweep is due: a sweep
#: never runs on an unfilled cache (every row not yet listed would look orphaned).
SYNC_POLL = 1.0


class ObjectReader(NamespaceLister, Protocol):
    """What the sweep needs of the API client: live reads (a namespace's, and one GET)."""

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        """The object, or :class:`NotFoundError`."""
        ...


@dataclass(frozen=True)
class SweepReport:
    """What one sweep found and did."""

    checked: int
    revoked: tuple[int, ...]
    unconfirmed: int
    without_cluster: int
    #: Rows whose check or revocation failed (logged; tried again next sweep).
    failed: int = 0


class OrphanSweeper:
    """Sweeps once ``active()`` says the cache is filled, then every ``interval`` seconds;
    a sweep due while it is not waits for it (see the module)."""

    def __init__(
        self,
        *,
        credentials: StoreCredentials,
        kube: ObjectReader,
        cache: ObjectCache,
        metrics: Metrics,
        cluster_id: str | None,
        interval: float,
        active: Callable[[], bool],
        namespaces: Callable[[], Sequence[str]] = tuple,
        sync_poll: float = SYNC_POLL,
    ) -> None:
        self._credentials = credentials
        self._kube = kube
        self._cache = cache
        self._metrics = metrics
        self.cluster_id = cluster_id
        self.interval = interval
        self._active = active
        self._namespaces = namespaces
        self._sync_poll = sync_poll
        self._reported_unowned: int | None = None

    async def run(self) -> None:
        """Sweep forever: once the cache is filled, then one interval apart at the least;
        never raises (errors are logged)."""
        if self.interval <= 0:
            log.info("orphan sweep off: CRAFT_ORPHAN_SWEEP_INTERVAL is 0")
            return
        if self.cluster_id is None:
            log.warning(
                "orphan sweep off: set CRAFT_CLUSTER_ID (a name unique among the clusters "
                "whose operators share this database) to revoke PATs of deleted sandboxes"
            )
            return
        loop = asyncio.get_running_loop()
        due = loop.time()  # the first sweep: as soon as the cache is filled
        while True:
            wait = due - loop.time()
            if wait <= 0 and self._active():
                await self.tick()
                due = loop.time() + self.interval
                continue
            # Not due yet; or due on a standby, or before the listing is in: look again soon.
            await asyncio.sleep(wait if wait > 0 else min(self._sync_poll, self.interval))

    async def tick(self) -> SweepReport | None:
        """One sweep: none (``None``) on a standby or before the cache is filled (:meth:`run`
        asks again soon); a failure is logged and left for the next one."""
        if self.cluster_id is None or not self._active():
            return None
        try:
            return await self.sweep_once()
        except (CredentialsError, ApiError) as exc:
            log.warning("orphan sweep failed, trying again in %.0fs: %s", self.interval, exc)
        except Exception:
            log.exception("orphan sweep failed, trying again in %.0fs", self.interval)
        return None

    async def sweep_once(self) -> SweepReport:
        """One sweep (see the module); the caller checks that this replica is active."""
        if self.cluster_id is None:
            raise RuntimeError("the orphan sweep needs a cluster id")
        rows = await self._credentials.call(
            _rows_of_cluster, self.cluster_id, tuple(self._namespaces())
        )
        revoked: list[int] = []
        unconfirmed = failed = 0
        for row in rows:
            if not self._active():
                break  # stood by meanwhile (its cache is emptied): the active one sweeps
            if self._alive_in_cache(row):
                continue
            try:
                orphan = await self._confirm_orphan(row)
                if orphan is None and await self._namespace_gone(row.namespace):
                    orphan = True
                if orphan is None:
                    unconfirmed += 1
                elif orphan:
                    done = await self._credentials.call(_revoke_orphan, row)
                    if self._said(done, row):
                        revoked.append(row.pat_id)
            except (CredentialsError, ApiError) as exc:
                failed += 1
                log.warning(
                    "orphan sweep: PAT %s of sandbox %s/%s left for the next sweep: %s",
                    row.pat_id,
                    row.namespace,
                    row.name,
                    exc,
                )
        self._metrics.orphans_revoked(len(revoked))
        unowned = await self._credentials.call(_count_without_cluster)
        if unowned and unowned != self._reported_unowned:
            log.warning(
                "orphan sweep: %d credential rows have no cluster id (written before it was "
                "recorded) and are never swept; claim this cluster's with: craft-operator "
                "credentials adopt",
                unowned,
            )
        self._reported_unowned = unowned
        return SweepReport(
            checked=len(rows),
            revoked=tuple(revoked),
            unconfirmed=unconfirmed,
            without_cluster=unowned,
            failed=failed,
        )

    def _said(self, done: Revocation | None, row: StoredCredential) -> bool:
        """Log what revoking an orphan's row did (a row forgotten for a tenant gone is
        logged where it is found); whether its PAT was revoked."""
        if done is None:
            return False  # the row changed since it was listed: a sandbox of that name
        self._credentials.forget(row.sandbox_uid)
        subject = (
            f"sandbox {row.namespace}/{row.name} (uid {row.sandbox_uid}), which no longer exists"
        )
        if done is Revocation.NOT_IN_ONYX:
            log.warning(
                "orphan sweep: forgot the credential of %s; nothing was revoked: PAT %s is not "
                "in Onyx (deleted, or its tenant's schema recreated or restored)",
                subject,
                row.pat_id,
            )
        elif done is Revocation.REVOKED:
            log.info("orphan sweep: revoked PAT %s of %s", row.pat_id, subject)
        return done is Revocation.REVOKED

    async def _namespace_gone(self, namespace: str) -> bool:
        """Whether the namespace does not exist: the watch cache holds the namespaces that
        do; one it lacks is asked for live (its immutable name label), so that a namespace
        created a moment ago is never taken for gone."""
        cached = self._cache.get(NAMESPACE.name, None, namespace)
        if cached is not None and self._cache.is_current(NAMESPACE.name, None):
            return False
        return await namespace_state(self._kube, namespace) == NamespaceState.GONE

    def _alive_in_cache(self, row: StoredCredential) -> bool:
        """Whether the cache holds the row's sandbox, and may be believed: while the watch
        of its namespace fails (its Role gone, say, with the namespace after it) the cache
        keeps what it last saw, and the API server is asked instead."""
        if not self._cache.is_current(SANDBOX.name, row.namespace):
            return False
        cached = self._cache.get(SANDBOX.name, row.namespace, row.name)
        return cached is not None and cached.get("metadata", {}).get("uid") == row.sandbox_uid

    async def _confirm_orphan(self, row: StoredCredential) -> bool | None:
        """True: the sandbox is gone (or replaced); False: it lives; None: cannot tell."""
        try:
            live = await self._kube.get(SANDBOXES, row.namespace, row.name)
        except NotFoundError as exc:
            if says_the_sandbox_is_gone(exc, row.name):
                return True
            log.warning(
                "orphan sweep: a 404 for sandbox %s/%s that does not name it (a proxy, or an "
                "API version not served?); left alone: %s",
                row.namespace,
                row.name,
                exc,
            )
            return None
        except ApiError as exc:
            log.debug("orphan sweep: cannot read sandbox %s/%s: %s", row.namespace, row.name, exc)
            return None
        return bool(live.get("metadata", {}).get("uid") != row.sandbox_uid)


def says_the_sandbox_is_gone(exc: NotFoundError, name: str) -> bool:
    """Whether a 404 is the API server's own answer that this CraftSandbox does not exist:
    its Status names the object, as an unserved version's or a proxy's 404 does not."""
    return (
        exc.reason == "NotFound"
        and exc.details.get("name") == name
        and exc.details.get("kind") == SANDBOXES.plural
    )


# The database's side of a sweep, imported in the database thread that runs it, once the
# store's opening has imported SQLAlchemy there (not at an idle start-up, and never in the
# event loop's thread beside that opening: two threads importing SQLAlchemy's modules at
# once can leave one of them half made, for good, in this process).


def _rows_of_cluster(
    store: CredentialStore, cluster_id: str, namespaces: tuple[str, ...]
) -> list[StoredCredential]:
    from craft_operator.credentials.orphans import rows_of_cluster

    return rows_of_cluster(store, cluster_id, namespaces)


def _revoke_orphan(store: CredentialStore, row: StoredCredential) -> Revocation | None:
    from craft_operator.credentials.orphans import revoke_orphan

    return revoke_orphan(store, row)


def _count_without_cluster(store: CredentialStore) -> int:
    from craft_operator.credentials.orphans import count_without_cluster

    return count_without_cluster(store)

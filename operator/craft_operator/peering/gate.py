"""Whether this replica acts: the switch between active and standby for the operator's own work.

The operator's watch streams and its work queue (timers, backoff, idle checks) are its own,
not kopf's, so kopf's peering would pause none of them, and a standby would go on
reconciling from a stale cache. The gate stops all of it on a standby and rebuilds it on
activation:

- standby: the workers stop (a pass in progress is cancelled, as if the process had died
  there), every pending visit is dropped, and the cache is emptied; the handlers drop watch
  events (:attr:`ActivityGate.active` is false), so nothing stale builds up;
- activation: the sandboxes and the operator's children are listed afresh into the cache
  (watch events are taken again from that moment; the cache keeps the newest version of
  each object), every sandbox is queued, and the workers start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import (
    ApiError,
    Kind,
    KubeClient,
)
from craft_operator.kube.namespaces import NamespaceState, namespace_state
from craft_operator.reconciler.queue import Backoff, WorkQueue

logger = logging.getLogger(__name__)

SandboxKey = tuple[str, str]

#: What an activated replica lists, as the watches see it: (API kind, cache kind, selector);
#: every kind of the registry, in its order (the NetworkPolicies first: a sandbox must not
#: look unprotected for want of them; the policy's reads before any sandbox is judged).
RELISTED: tuple[tuple[Kind, str, str | None], ...] = tuple(
    (kind.api, kind.name, kind.selector) for kind in kinds.KINDS
)


class ActivityGate:
    """Active (the default, and always in standalone mode) or standby; see the module."""

    def __init__(
        self,
        *,
        kube: KubeClient,
        cache: ObjectCache,
        queue: WorkQueue[SandboxKey],
        namespaces: Sequence[str] = (),
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._queue = queue
        #: Watched namespaces; empty: all.
        self.namespaces: tuple[str, ...] = tuple(namespaces)
        self._active = True
        self._lock = asyncio.Lock()
        self.activations = 0
        #: Held until the first listing is in the cache (see :meth:`hold_until_primed`).
        self.priming = False
        self._listing = False
        #: Step-downs asked for so far: one asked while a takeover lists calls it off.
        self._standby_asked = 0
        #: Work outside the queue that a standby must stop too (e.g. the library syncs).
        self.stop_also: list[Callable[[], Awaitable[None]]] = []
        #: Further work queues that pause, clear and resume with the sandboxes' queue, each
        #: with the cache kind whose every object it visits on activation (the pools').
        self.followers: list[tuple[WorkQueue[SandboxKey], str]] = []

    @property
    def active(self) -> bool:
        """Whether the replica acts on what it sees (the handlers check this)."""
        return self._active

    @property
    def cache_synced(self) -> bool:
        """Whether the replica is active with everything listed into its cache: work that
        reads the cache for what is absent (the orphan sweep) waits for this."""
        return self._active and not self.priming and not self._listing

    async def hold_until_primed(self) -> None:
        """Start inactive: no reconcile until :meth:`prime` has listed everything.

        Each kind is listed by its own stream, in no set order: a sandbox could be
        reconciled before its pod's listing arrived, look podless, and have a pod created
        (refused as a duplicate). Controllers wait for their caches to sync; this is that.
        """
        self._active = False
        self.priming = True
        await self._queue.pause()
        for queue, _ in self.followers:
            await queue.pause()

    async def prime(self, *, max_delay: float = 30.0) -> None:
        """Once the API client is connected, list everything and become active.

        A failed listing is logged and retried with backoff until it succeeds.
        """
        await self._kube.connected.wait()
        backoff = Backoff(base=min(1.0, max_delay), cap=max_delay, jitter=0.0)
        failures = 0
        while True:
            try:
                await self.activate("the first listing is in the cache")
            except ApiError as exc:
                failures += 1
                delay = backoff.delay(failures)
                logger.warning("cannot list the sandboxes yet (%s); retrying in %.0fs", exc, delay)
                await asyncio.sleep(delay)
            else:
                self.priming = False
                return

    async def deactivate(self, reason: str) -> None:
        """Become a standby: stop the work and forget the state (no-op if standby already)."""
        self._standby_asked += 1  # (before the lock: a takeover listing now must not resume)
        async with self._lock:
            if not self._active:
                return
            self._active = False
            await self._queue.pause()
            self._queue.clear()
            for queue, _ in self.followers:
                await queue.pause()
                queue.clear()
            for stop in self.stop_also:
                await stop()
            self._cache.clear()
            logger.info("standby: no reconciling while %s", reason)

    async def activate(self, reason: str) -> None:
        """Become active: relist, queue every sandbox, start the work (no-op if active).

        An API error while listing leaves the replica in standby and is raised.
        """
        async with self._lock:
            if self._active:
                return
            asked = self._standby_asked
            self._active = True  # watch events count again from here, during the listing too
            self._listing = True
            try:
                keys = await self._relist()
            except BaseException:
                self._active = False
                self._cache.clear()
                raise
            finally:
                self._listing = False
            if self._standby_asked != asked:
                # A step-down came while it listed (the preferred replica is back): no pass
                # starts, not even one that would be cancelled after its first write.
                self._active = False
                self._cache.clear()
                logger.info("standby: the takeover (%s) was called off while listing", reason)
                return
            for key in keys:
                self._queue.add(key)
            self._queue.resume()
            for queue, cache_kind in self.followers:
                for (_, namespace, name), _ in self._cache.items(cache_kind):
                    queue.add((namespace or "", name))
                queue.resume()
            self.activations += 1
            logger.info("active: reconciling %d sandboxes (%s)", len(keys), reason)

    async def _relist(self) -> list[SandboxKey]:
        scopes: Sequence[str | None] = self.namespaces or (None,)
        keys: list[SandboxKey] = []
        gone: set[str] = set()
        for kind, cache_kind, selector in RELISTED:
            for namespace in scopes if kind.namespaced else (None,):
                if namespace in gone:
                    continue
                try:
                    async for obj in self._kube.iterate(kind, namespace, label_selector=selector):
                        self._cache.put(cache_kind, obj)
                        if cache_kind == kinds.SANDBOX.name:
                            meta = obj.get("metadata", {})
                            keys.append((meta.get("namespace", ""), meta["name"]))
                except ApiError as exc:
                    if exc.status == 404 and kind.group:
                        raise _not_served(kind, exc) from exc
                    if exc.status != 403 or namespace is None:
                        raise
                    if not await self._deleted(namespace) and not self._left_out(namespace):
                        raise
                    gone.add(namespace)
        return [key for key in keys if key[0] not in gone]

    def _left_out(self, namespace: str) -> bool:
        """Whether a taking-over replica serves the others without ``namespace``, whose
        Role it lacks: one namespace's RBAC pruned or edited while the operator ran must not
        leave every namespace without an active replica at the next failover or rollout. A
        first start refuses instead (the start's access check names what to apply)."""
        if self.priming:
            return False
        logger.error(
            "the operator may not list in namespace %s (its Role or RoleBinding is gone?): "
            "taking over the other namespaces without it; apply manifests/sandbox-namespace "
            "there (its watches fail meanwhile: CraftChildWatchFailing)",
            namespace,
        )
        return True

    async def _deleted(self, namespace: str) -> bool:
        """Whether a served namespace is being deleted or gone (its Role with it): one
        namespace torn down must not keep this replica from taking over the others."""
        if await namespace_state(self._kube, namespace) == NamespaceState.ACTIVE:
            return False
        logger.warning(
            "namespace %s is being deleted or gone, and the operator may not list in it: "
            "left out until it comes back (README, Deleting a sandbox namespace)",
            namespace,
        )
        return True


def _not_served(kind: Kind, exc: ApiError) -> ApiError:
    """A 404 on listing a custom resource said as what it most likely means: its CRD is
    not installed (one missing holds the operator back from every sandbox)."""
    return ApiError(
        exc.status,
        exc.reason,
        f"the API server does not serve {kind.plural}.{kind.group} ({exc.message}): is its "
        "CRD installed? kubectl apply --server-side -k crds/",
        exc.details,
    )

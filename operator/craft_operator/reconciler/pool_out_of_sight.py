"""Pool pods out of the pool's sight: their labels edited so that the watches, which select
by the managed-by label, were told they were deleted while they run on, or so that the pool,
which counts its pods by its ``craft.onyx.app/pool`` label, no longer counts them.

The pool has replaced such a pod by then (it no longer counts it), and no claim can take it
(the cache lacks it, or the claims' index, which selects by the pool label), so it would run
on, unclaimed, until the pool went. The children's handler notes each pool pod reported
deleted while no deletion was under way (a deletion through the API server sets
``deletionTimestamp`` first), and the cache indexes those the pool controls without its
label (:data:`~craft_operator.reconciler.pool_pods.UNLABELLED`); the pool's next pass reads
each and deletes it if it is still there, its own, unclaimed and unlabelled.

Those notes live in this process only: one that starts, or takes over from another
replica, never sees the events that were lost with them. So the first pass of each pool in
an activation also lists the pods that still carry the pool's label but not the operator's
(one list per pool, answered by the API server's watch cache) and notes those.

A pod whose deletion is refused (an admission webhook, a policy) is tried again on every
pass; the refusal is logged and posted on the pool when it first comes and when its answer
changes, not on every pass. The API server being away is no refusal: that is kept quiet
here (the pass's other requests meet it too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from craft_operator.api.pool import LABEL_POOL
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError, NotFoundError
from craft_operator.kube.kinds import LABEL_MANAGED_BY, MANAGED_BY
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.pool_pods import belongs_to, unlabelled_pod_names

log = logging.getLogger(__name__)
POD = kinds.POD
PoolKey = tuple[str, str]

#: The Warning event that says a pod out of sight was deleted.
OUT_OF_SIGHT = "PoolPodOutOfSight"
#: The Warning event that says the deletion of a pod out of sight was refused.
UNDELETABLE = "PoolPodOutOfSightUndeletable"


class OutOfSight:
    """The pods of each pool reported deleted while not being deleted, until looked at."""

    def __init__(self) -> None:
        self._names: dict[PoolKey, set[str]] = {}
        #: The pools (key and uid) whose pods out of sight were listed in this activation.
        self._listed: set[tuple[PoolKey, str]] = set()
        #: The answer (status and reason) last said of each pod noted whose deletion was
        #: refused, per pool; a pod deleted, gone or back in sight is forgotten.
        self._said: dict[PoolKey, dict[str, str]] = {}

    def note(self, key: PoolKey, name: str) -> None:
        """Pod ``name`` of pool ``key`` was reported deleted without a deletion under way."""
        self._names.setdefault(key, set()).add(name)

    def noted(self, key: PoolKey) -> frozenset[str]:
        """The pods of pool ``key`` noted and not looked at yet."""
        return frozenset(self._names.get(key, ()))

    def forget(self, key: PoolKey | None = None) -> None:
        """Drop what was noted of pool ``key`` (of every pool: ``None``)."""
        if key is None:
            self._names.clear()
            self._listed.clear()
            self._said.clear()
        else:
            self._names.pop(key, None)
            self._said.pop(key, None)
            self._listed = {listed for listed in self._listed if listed[0] != key}

    async def list_once(self, services: Services, body: Mapping[str, Any]) -> None:
        """Note the pods of the pool ``body`` already out of sight when this activation
        began, once per pool: those labelled as its own but not as the operator's, that it
        controls and nobody is deleting. A failed list is tried again on the next pass."""
        meta = body["metadata"]
        key, uid = (meta["namespace"], meta["name"]), str(meta.get("uid") or "")
        if (key, uid) in self._listed:
            return
        selector = f"{LABEL_POOL}={meta['name']},{LABEL_MANAGED_BY}!={MANAGED_BY}"
        try:
            found = await services.kube.list(POD.api, key[0], label_selector=selector)
        except ApiError as exc:
            level = logging.INFO if exc.away else logging.WARNING
            log.log(level, "%s/%s: pods out of sight not listed: %s", *key, exc)
            return
        self._listed.add((key, uid))
        for pod in found:
            if controlled_by(pod, uid) and not pod["metadata"].get("deletionTimestamp"):
                self.note(key, pod["metadata"]["name"])

    async def settle(self, services: Services, body: Mapping[str, Any]) -> list[str]:
        """Read each pod noted for the pool ``body`` and delete those that are still out of
        sight (the cache lacks them: one whose labels were put back is the pool's again),
        its own, unclaimed and not being deleted; returns their names. A pod whose read or
        delete fails is kept for a later pass, and the pass goes on (a webhook refusing
        deletes must not stop the pool); a refusal is said when it first comes or changes."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        names = self._names.pop(key, set())
        names.update(unlabelled_pod_names(services.cache, *key, str(meta.get("uid") or "")))
        said = self._said.pop(key, {})  # kept below for the pods still refused only
        if not names:
            return []
        deleted = []
        for name in sorted(names):
            cached = services.cache.get(POD.name, key[0], name)
            if cached is not None and belongs_to(cached, key[1]):
                continue  # back in sight
            try:
                if await _delete_if_out_of_sight(services, meta, name):
                    deleted.append(name)
            except ApiError as exc:
                self._names.setdefault(key, set()).add(name)
                self._refused(services, body, name, exc, said.get(name))
        if deleted:
            message = (
                f"deleted pods {', '.join(deleted)}: their labels were edited so that the "
                "operator's watches or the pool no longer saw them (the pool made others in "
                "their place)"
            )
            services.events.post(dict(body), type="Warning", reason=OUT_OF_SIGHT, message=message)
        return deleted

    def _refused(
        self,
        services: Services,
        body: Mapping[str, Any],
        name: str,
        exc: ApiError,
        said: str | None,
    ) -> None:
        """Remember that pod ``name``'s read or delete failed with ``exc``; log it and post
        it on the pool if it was not said before (``said``: what was). The API server being
        away is no refusal: kept quiet, and what was said stays."""
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if exc.away:
            log.debug("%s/%s: pod %s out of sight not deleted: %s", *key, name, exc)
            if said is not None:
                self._said.setdefault(key, {})[name] = said
            return
        answer = f"{exc.status} {exc.reason}"  # the message may vary per request
        self._said.setdefault(key, {})[name] = answer
        if answer == said:
            log.debug("%s/%s: pod %s out of sight still not deleted: %s", *key, name, exc)
            return
        log.warning("%s/%s: pod %s out of sight not deleted: %s", *key, name, exc)
        message = (
            f"cannot delete pod {name}, whose labels were edited so that the operator's "
            f"watches or the pool no longer see it (the pool made another in its place): {exc}; "
            "tried again on each pass"
        )
        services.events.post(dict(body), type="Warning", reason=UNDELETABLE, message=message)


async def _delete_if_out_of_sight(services: Services, pool: Mapping[str, Any], name: str) -> bool:
    """Delete pod ``name`` as read, if the pool (``pool``: its metadata) still controls it,
    it is still out of sight and no deletion is under way; whether it was deleted. The
    delete is conditional on the version read: a claim landing in between changes it, and
    the pod is kept."""
    namespace = pool["namespace"]
    try:
        found = await services.kube.get(POD.api, namespace, name)
    except NotFoundError:
        return False
    meta = found["metadata"]
    if meta.get("deletionTimestamp") or not controlled_by(found, pool.get("uid")):
        return False  # going already, or claimed since (the sandbox's), or another's
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and belongs_to(found, pool["name"]):
        return False  # its labels put back since: the pool's again
    try:
        answer = await services.kube.delete(
            POD.api,
            namespace,
            name,
            uid=meta.get("uid"),
            resource_version=meta.get("resourceVersion"),
        )
    except ConflictError:
        return False
    return answer is not None

"""CraftSandboxPool events: keep the cache current and queue the pool on its own queue."""

from __future__ import annotations

from typing import Any

import kopf

from craft_operator.context import OperatorContext
from craft_operator.kube import kinds

RESOURCE = kinds.POOL.api.resource


async def pool_event(event: kopf.RawEvent, memo: OperatorContext, **_: Any) -> None:
    """Any change to a pool (or the initial listing) queues it; a deleted pool is visited
    once more, to delete what is left of its unclaimed pods."""
    if not memo.gate.active:
        return
    obj = event["object"]
    meta = obj.get("metadata", {})
    key = (meta.get("namespace", ""), meta["name"])
    if event["type"] == "DELETED":
        memo.cache.remove(kinds.POOL.name, obj)
        memo.pool_queue.add(key)
        return
    if memo.cache.put(kinds.POOL.name, obj) or event["type"] is None:
        memo.pool_queue.add(key)


def queue_pools(memo: OperatorContext, namespace: str) -> None:
    """Queue every pool of ``namespace`` (e.g. a NetworkPolicy there changed)."""
    for body in memo.cache.in_namespace(kinds.POOL.name, namespace):
        memo.pool_queue.add((namespace, body["metadata"]["name"]))


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the CraftSandboxPool handler."""
    kopf.on.event(*RESOURCE, registry=registry, id="pool-event")(pool_event)

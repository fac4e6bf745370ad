"""CraftSandboxPool events: keep the cache current and queue the pool on its own queue."""

from __future__ import annotations

from typing import Any

from craft_operator.context import OperatorContext
from craft_operator.kube import kinds


def on_pool_event(memo: OperatorContext, event_type: str, obj: dict[str, Any]) -> None:
    """Any change to a pool queues it; a deleted pool is visited once more, to delete what
    is left of its unclaimed pods."""
    if not memo.gate.active:
        return
    meta = obj.get("metadata", {})
    key = (meta.get("namespace", ""), meta["name"])
    if event_type == "DELETED":
        memo.cache.remove(kinds.POOL.name, obj)
        memo.pool_queue.add(key)
        return
    before = memo.cache.get(kinds.POOL.name, *key)
    if memo.cache.put(kinds.POOL.name, obj):
        if before is not None and before["metadata"].get("uid") != meta.get("uid"):
            # Recreated under its name before a pass saw the old one gone: the new pool
            # inherits none of its backoffs (a quota's refusal, a crashing template).
            memo.pool_queue.forget(key)
            memo.pool_reconciler.forget(key)
        memo.pool_queue.add(key)


def queue_pools(memo: OperatorContext, namespace: str) -> None:
    """Queue every pool of ``namespace`` (e.g. a NetworkPolicy there changed)."""
    for body in memo.cache.in_namespace(kinds.POOL.name, namespace):
        memo.pool_queue.add((namespace, body["metadata"]["name"]))

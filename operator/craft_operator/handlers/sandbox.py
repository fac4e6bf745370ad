"""CraftSandbox events: keep the cache current and queue the sandbox for reconciliation."""

from __future__ import annotations

from typing import Any

import kopf

from craft_operator.context import OperatorContext
from craft_operator.kube import kinds

RESOURCE = kinds.SANDBOX.api.resource


async def sandbox_event(event: kopf.RawEvent, memo: OperatorContext, **_: Any) -> None:
    """Any change to a CraftSandbox (or the initial listing) queues it; deletion forgets it.

    A standby ignores it: it keeps no state, and relists when it becomes active.
    """
    if not memo.gate.active:
        return
    obj = event["object"]
    meta = obj.get("metadata", {})
    key = (meta.get("namespace", ""), meta["name"])
    if event["type"] == "DELETED":
        memo.cache.remove(kinds.SANDBOX.name, obj)
        memo.queue.forget(key)
        memo.reconciler.forget(key)
        return
    if memo.cache.put(kinds.SANDBOX.name, obj) or event["type"] is None:
        # New to us (not the echo of our own write); the initial listing is always visited.
        memo.queue.add(key)


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the CraftSandbox handlers."""
    kopf.on.event(*RESOURCE, registry=registry, id="sandbox-event")(sandbox_event)

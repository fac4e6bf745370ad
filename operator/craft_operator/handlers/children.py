"""Events of the operator's own children (pods, Secrets, ConfigMaps, PVCs, Jobs): update the
cache, wake the owner.

They come from the operator's own watch streams (:mod:`craft_operator.handlers.streams`),
filtered on the API server by the managed-by label, so only the operator's children come
in; what comes while the replica is a standby is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import KIND
from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL, POOL_KIND
from craft_operator.builders.naming import LABEL_SANDBOX
from craft_operator.context import OperatorContext
from craft_operator.kube import kinds

#: Seconds a pool pass waits after an event of one of its pods, so that the events of a
#: claim and of the refill that follows (created, scheduled, running, ready) and those of
#: claims close together cost one pass over the pool's pods, not one each.
POOL_EVENT_DELAY = 0.25


def owning_sandbox(meta: Mapping[str, Any]) -> str | None:
    """The CraftSandbox a child belongs to: its controller reference, else its label.

    The owner reference comes first: labels can be edited by anyone, and an edited label
    must still wake the sandbox that will put it back.
    """
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == KIND and ref.get("name"):
            return str(ref["name"])
    label = (meta.get("labels") or {}).get(LABEL_SANDBOX)
    return str(label) if label else None


def owning_pools(meta: Mapping[str, Any]) -> set[str]:
    """The pools a pod event concerns: the one it belongs to, or the one it was claimed from
    (a claim takes it out of its pool, which then refills), and the one that controls it
    (its pool label edited away, the pool must refill, and delete it)."""
    labels = meta.get("labels") or {}
    pools = {str(labels[key]) for key in (LABEL_POOL, LABEL_CLAIMED_FROM) if labels.get(key)}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == POOL_KIND and ref.get("name"):
            pools.add(str(ref["name"]))
    return pools


def claimed_from(meta: Mapping[str, Any]) -> str | None:
    """The pool a claimed pod was taken from, if it was."""
    pool = (meta.get("labels") or {}).get(LABEL_CLAIMED_FROM)
    return str(pool) if pool else None


def on_child_event(memo: OperatorContext, kind: str, event_type: str, obj: dict[str, Any]) -> None:
    """A change to one of our children (cache kind ``kind``): cache it, queue its owner."""
    if not memo.gate.active:
        return  # a standby keeps no state (see craft_operator.peering.gate)
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace", "")
    if event_type == "DELETED":
        # A deletion a stream inferred from a relist carries only the name: the owner is
        # read from the copy in the cache.
        name = meta.get("name", "")
        cached = memo.cache.get(kind, namespace, name)
        memo.cache.remove(kind, obj)
        if memo.cache.get(kind, namespace, name) is not None:
            return  # the cache holds a newer object of that name: it is not gone
        if cached is not None and not meta.get("labels") and not meta.get("ownerReferences"):
            meta = cached.get("metadata", meta)
        if kind == kinds.POD.name and not meta.get("deletionTimestamp"):
            # No deletion was under way: a label edit took it out of the watches' sight.
            pool = (meta.get("labels") or {}).get(LABEL_POOL)
            if pool:
                memo.pool_reconciler.out_of_sight.note((namespace, str(pool)), name)
    elif not memo.cache.put(kind, obj):
        # The echo of our own write, or an old version: nothing new to the sandbox. A
        # claim, though, is the sandbox's write, which its pool has not seen: the pool
        # must learn it lost a pod (and refill) now, not at its next resync.
        if kind == kinds.POD.name and (pool := claimed_from(meta)):
            memo.pool_queue.add((namespace, pool), delay=POOL_EVENT_DELAY)
        return
    owner = owning_sandbox(meta)
    if owner:
        echo = memo.echo_check(meta) if event_type != "DELETED" else None
        memo.queue.add((namespace, owner), echo=echo)
    if kind == kinds.POD.name:
        for pool in owning_pools(meta):
            memo.pool_queue.add((namespace, pool), delay=POOL_EVENT_DELAY)

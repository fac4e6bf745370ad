"""CraftSandbox events: keep the cache current and queue the sandbox for reconciliation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from craft_operator.api.times import parse_time
from craft_operator.context import OperatorContext
from craft_operator.kube import kinds


def on_sandbox_event(memo: OperatorContext, event_type: str, obj: dict[str, Any]) -> None:
    """Any change to a CraftSandbox queues it; its deletion forgets it.

    A standby ignores it: it keeps no state, and relists when it becomes active.
    """
    if not memo.gate.active:
        return
    meta = obj.get("metadata", {})
    key = (meta.get("namespace", ""), meta["name"])
    if event_type == "DELETED":
        # A deletion a watch inferred from a relist names the sandbox only: its uid is the
        # cached copy's.
        cached = memo.cache.get(kinds.SANDBOX.name, *key) or {}
        uid = meta.get("uid") or cached.get("metadata", {}).get("uid", "")
        memo.cache.remove(kinds.SANDBOX.name, obj)
        if memo.cache.get(kinds.SANDBOX.name, *key) is not None:
            return  # a newer sandbox of that name (created since): it is not gone
        memo.queue.forget(key)
        memo.reconciler.forget(key)
        # Its PAT was revoked by its finalizer, or, removed by hand, is the orphan sweep's.
        memo.services.credentials.forget(str(uid))
        memo.services.metrics.sandbox_gone(str(uid))
        return
    before = memo.cache.get(kinds.SANDBOX.name, *key)
    recreated = before is not None and before["metadata"].get("uid") != meta.get("uid")
    if before is None or recreated:
        _note_creation(memo, meta)
    if memo.cache.put(kinds.SANDBOX.name, obj):
        if before is not None and recreated:
            # Recreated under its name while its deletion went unseen (a relist): the new
            # sandbox inherits nothing of the old one's backoffs and memory.
            memo.queue.forget(key)
            memo.reconciler.forget(key)
            gone = str(before["metadata"].get("uid", ""))
            memo.services.credentials.forget(gone)
            memo.services.metrics.sandbox_gone(gone)
        # New to the cache; the echo of the running pass's own write all the same if its
        # event came before the write's answer (asked when that pass ends).
        memo.queue.add(key, echo=memo.echo_check(meta))


def _note_creation(memo: OperatorContext, meta: dict[str, Any]) -> None:
    """A sandbox created within the second (not one a relist found): the moment it was
    seen stands for its creation in its time to Ready, to the millisecond."""
    created = parse_time(meta.get("creationTimestamp"))
    if created is None:
        return
    now = memo.services.clock()
    if timedelta(0) <= now - created < timedelta(seconds=1):
        memo.services.metrics.saw_created(str(meta.get("uid", "")), now)

"""The CraftSandboxPolicy and namespaces: cache them, and queue the sandboxes they judge.

A changed policy queues every sandbox and every pool (a tightened one must reach running
sandboxes and warm pods, a loosened one revives refused ones); a namespace's change queues
the sandboxes in it (its tenant label may have moved). Both kinds are cluster-scoped and
watched cluster-wide.
"""

from __future__ import annotations

from typing import Any

from craft_operator.context import OperatorContext
from craft_operator.kube import kinds
from craft_operator.policy.models import POLICY_NAME
from craft_operator.reconciler.policy_step import NAMESPACE, POLICY


def _queue_sandboxes(memo: OperatorContext, namespace: str | None = None) -> None:
    for key, _ in memo.cache.items(kinds.SANDBOX.name):
        if namespace is None or key[1] == namespace:
            memo.queue.add((key[1] or "", key[2]))


def on_policy_event(memo: OperatorContext, event_type: str, obj: dict[str, Any]) -> None:
    """The CraftSandboxPolicy changed: every sandbox and every pool is judged again."""
    if not memo.gate.active:
        return
    if obj.get("metadata", {}).get("name") != POLICY_NAME:
        return
    if event_type == "DELETED":
        memo.cache.remove(POLICY, obj)
    elif not memo.cache.put(POLICY, obj):
        return
    _queue_sandboxes(memo)
    for key, _ in memo.cache.items(kinds.POOL.name):  # a pool's pod settings are judged too
        memo.pool_queue.add((key[1] or "", key[2]))


def on_namespace_event(memo: OperatorContext, event_type: str, obj: dict[str, Any]) -> None:
    """A namespace changed (e.g. its tenant label): its sandboxes are judged again."""
    if not memo.gate.active:
        return
    if event_type == "DELETED":
        memo.cache.remove(NAMESPACE, obj)
        return
    before = memo.cache.get(NAMESPACE, None, obj["metadata"]["name"])
    if not memo.cache.put(NAMESPACE, obj):
        return
    labels = (before or {}).get("metadata", {}).get("labels")
    if before is None or labels != obj["metadata"].get("labels"):
        _queue_sandboxes(memo, obj["metadata"]["name"])

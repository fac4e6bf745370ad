"""NetworkPolicies of the served namespaces: cache them, and wake the sandboxes whose pod
waits for one that restricts its egress (see :mod:`craft_operator.reconciler.egress`).

Every policy in the namespace counts, not only the operator's: the platform may restrict
the sandboxes' egress with a policy of its own.
"""

from __future__ import annotations

from typing import Any

from craft_operator.context import OperatorContext
from craft_operator.handlers.pools import queue_pools
from craft_operator.kube import kinds
from craft_operator.reconciler import egress


def on_network_policy_event(memo: OperatorContext, event_type: str, obj: dict[str, Any]) -> None:
    """A NetworkPolicy appeared, changed or went: cache it; queue the sandboxes waiting."""
    if not memo.gate.active:
        return  # a standby keeps no state (see craft_operator.peering.gate)
    namespace = obj.get("metadata", {}).get("namespace", "")
    if event_type == "DELETED":
        memo.cache.remove(egress.NETWORK_POLICY, obj)
        # Running pods keep running; new ones are checked when they are made. A pool says
        # in its status whether it may make them: now it may not.
        queue_pools(memo, namespace)
        return
    if not memo.cache.put(egress.NETWORK_POLICY, obj):
        return
    for key in egress.waiting_on(memo.cache, namespace, kinds.SANDBOX.name, kinds.POD.name):
        memo.queue.add(key)
    queue_pools(memo, namespace)  # a pool that waits for one says so in its status; few

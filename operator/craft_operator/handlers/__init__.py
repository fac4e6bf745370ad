"""kopf wiring only: each handler translates an event into calls on the cache and the queue
(the children's events come from the operator's own watch streams: see ``children``)."""

from __future__ import annotations

import kopf

from craft_operator.handlers import lifecycle, networkpolicies, policy, pools, sandbox


def register(registry: kopf.OperatorRegistry) -> None:
    """Register every handler of the operator on ``registry``."""
    lifecycle.register(registry)
    sandbox.register(registry)
    networkpolicies.register(registry)
    policy.register(registry)
    pools.register(registry)

"""kopf wiring only: start-up and clean-up (:mod:`.lifecycle`), which start the operator's
own watch streams (:mod:`.streams`); each event handler translates an event into calls on
the cache and the queues."""

from __future__ import annotations

import kopf

from craft_operator.handlers import lifecycle


def register(registry: kopf.OperatorRegistry) -> None:
    """Register every kopf handler of the operator on ``registry``."""
    lifecycle.register(registry)

"""kopf wiring only: each handler translates an event into calls on builders and services."""

from __future__ import annotations

import kopf

from craft_operator.handlers import sandbox


def register(registry: kopf.OperatorRegistry) -> None:
    """Register every handler of the operator on ``registry``."""
    sandbox.register(registry)

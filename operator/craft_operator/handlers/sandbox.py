"""Handlers for CraftSandbox objects."""

from __future__ import annotations

from typing import Any

import kopf

from craft_operator.api import models
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox

RESOURCE = (models.GROUP, models.VERSION, models.PLURAL)


async def reconcile(body: kopf.Body, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    """Bring one CraftSandbox towards its spec and record what was observed."""
    try:
        sandbox = parse_sandbox(body)
    except InvalidSandboxError as exc:
        patch.status["phase"] = models.Phase.FAILED.value
        patch.status["observedGeneration"] = body.meta.get("generation")
        raise kopf.PermanentError(f"invalid CraftSandbox: {exc}") from None
    if sandbox.status.phase is None:
        patch.status["phase"] = models.Phase.PENDING.value
    patch.status["observedGeneration"] = sandbox.metadata.generation
    logger.debug("observed generation %s", sandbox.metadata.generation)


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the CraftSandbox handlers."""
    for decorator in (kopf.on.create, kopf.on.resume, kopf.on.update):
        decorator(*RESOURCE, registry=registry, id="reconcile")(reconcile)

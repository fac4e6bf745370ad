"""Operator start and stop: the reconcile workers run inside kopf's context."""

from __future__ import annotations

from typing import Any

import kopf

from craft_operator.context import OperatorContext


async def start_workers(memo: OperatorContext, logger: kopf.Logger, **_: Any) -> None:
    """Start the reconcile workers (they post events, so they need kopf's context)."""
    memo.events.start()
    memo.queue.start()
    logger.info("started %d reconcile workers", memo.settings.workers)


async def stop_workers(memo: OperatorContext, **_: Any) -> None:
    """Stop the workers and close the API client."""
    await memo.queue.stop()
    await memo.events.stop()
    await memo.kube.close()


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the start-up and clean-up handlers."""
    kopf.on.startup(registry=registry, id="start-workers")(start_workers)
    kopf.on.cleanup(registry=registry, id="stop-workers")(stop_workers)

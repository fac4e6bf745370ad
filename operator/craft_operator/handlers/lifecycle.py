"""Operator start and stop: the reconcile workers run inside kopf's context."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from craft_operator.context import OperatorContext
from craft_operator.handlers.streams import watch_streams


async def start_workers(memo: OperatorContext, logger: kopf.Logger, **_: Any) -> None:
    """Start the reconcile workers (they post events, so they need kopf's context).

    A standalone operator's workers wait until the first listing is in the cache.
    """
    memo.events.start()
    memo.queue.start()
    memo.pool_queue.start()
    if memo.gate.priming:
        memo.background.add(asyncio.create_task(memo.gate.prime(), name="prime-cache"))
    if memo.sweeper is not None:
        memo.background.add(asyncio.create_task(memo.sweeper.run(), name="orphan-sweep"))
    for stream in watch_streams(memo):
        memo.background.add(asyncio.create_task(stream.run(), name=f"watch {stream.name}"))
    logger.info("started %d reconcile workers", memo.settings.workers)


#: Seconds a pass in progress at shutdown may take to end: a pass takes milliseconds, but
#: one cut off between two writes that belong together (a sync Job and its Secret) should
#: rather end; Kubernetes waits 30 s after SIGTERM.
STOP_GRACE = 5.0


async def stop_workers(memo: OperatorContext, **_: Any) -> None:
    """Stop the workers and close the API client and the S3 connections."""
    for task in memo.background:
        task.cancel()
    await asyncio.gather(*memo.background, return_exceptions=True)
    memo.background.clear()
    await memo.queue.stop(grace=STOP_GRACE)
    await memo.pool_queue.stop(grace=STOP_GRACE)
    await memo.events.stop()
    await memo.services.library.close()
    await memo.kube.close()


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the start-up and clean-up handlers."""
    kopf.on.startup(registry=registry, id="start-workers")(start_workers)
    kopf.on.cleanup(registry=registry, id="stop-workers")(stop_workers)

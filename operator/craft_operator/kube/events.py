"""Kubernetes events about CraftSandboxes, posted in the background.

Posting never blocks or fails a reconcile: events go into a bounded queue, one task posts
them, and an event that cannot be posted (or does not fit in the queue) is counted and
dropped, never retried forever. Messages are cut to the API's 1 KiB limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from craft_operator.kube.client import ApiError, Kind, KubeClient

logger = logging.getLogger(__name__)

EVENTS = Kind("v1", "events")
COMPONENT = "craft-operator"
MAX_MESSAGE = 1024


def build_event(
    involved: Mapping[str, Any], *, type: str, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A core/v1 Event about ``involved``."""
    meta = involved.get("metadata", {})
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta.get('name', 'object')}.",
            "namespace": meta.get("namespace"),
        },
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": type,
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    """An :class:`~craft_operator.reconciler.ports.EventSink` that posts through the API."""

    def __init__(self, kube: KubeClient, *, capacity: int = 10_000) -> None:
        self._kube = kube
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self._task: asyncio.Task[None] | None = None
        self.posted = 0
        self.dropped = 0

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Queue an event about ``body`` (dropped and counted if the queue is full)."""
        event = build_event(body, type=type, reason=reason, message=message, now=datetime.now(UTC))
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    def start(self) -> None:
        """Start posting queued events."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-poster")

    async def drained(self) -> None:
        """Return once every event queued so far is posted (or given up on)."""
        await self._queue.join()

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Post what is queued (for up to ``drain_timeout`` seconds), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained(), drain_timeout)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._kube.create(EVENTS, event)
                self.posted += 1
            except ApiError as exc:
                self.dropped += 1
                logger.warning("could not post event %s: %s", event["reason"], exc)
            finally:
                self._queue.task_done()

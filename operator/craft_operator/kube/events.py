"""Kubernetes events about CraftSandboxes, posted in the background.

Posting never blocks or fails a reconcile: events go into a bounded queue, one task posts
them, and an event that cannot be posted (or does not fit in the queue) is counted and
dropped, never retried forever. Messages are cut to 1,024 characters.

Repeats are folded into a series, as client-go's ``EventCorrelator`` does: an event equal
(same object, type, reason and message) to one this recorder posted within ``window``
seconds is not created again; its ``count`` and ``lastTimestamp`` are merge-patched onto
the Event already stored. A PATCH costs the API server one write like a POST, so repeats
are not patched one by one: they are counted, and one PATCH per ``patch_interval`` per
series carries them all (the next repeat after the interval sends it at once; repeats
still pending are flushed when the poster is idle and when it stops). The series are kept
in a bounded LRU (``max_series`` keys, no object bodies).

And, as client-go's spam filter, each object may start at most ``burst`` new series of
each type at once, then one per ``refill`` seconds: whoever writes a CraftSandbox (an
invalid value in each of a stream of annotation writes, say) gets its own events dropped
past that, never the queue filled and the other sandboxes' events with it. Normal and
Warning events have a budget each, so that routine news (a library synced on every upload)
never costs an object its warnings. The first drop of each object's budget is logged
(again once it has refilled). The buckets are kept in a bounded LRU too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from craft_operator.kube.client import ApiError, Kind, KubeClient, NotFoundError
from craft_operator.kube.event_batch import MAX_MESSAGE

logger = logging.getLogger(__name__)

EVENTS = Kind("v1", "events")
COMPONENT = "craft-operator"
__all__ = ["COMPONENT", "EVENTS", "MAX_MESSAGE", "EventRecorder", "build_event"]


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


SeriesKey = tuple[str, str, str, str, str]


@dataclass
class _Series:
    """An event this recorder posted, and its repeats not yet written."""

    namespace: str
    seen: float
    written: float
    count: int = 1
    pending: int = 0
    last: str = ""
    #: The stored Event's name, once its creation was answered.
    name: str | None = None
    queued: bool = False


def _series_key(event: Mapping[str, Any]) -> SeriesKey:
    involved = event["involvedObject"]
    return (
        str(involved.get("uid") or ""),
        f"{involved.get('namespace')}/{involved.get('kind')}/{involved.get('name')}",
        event["type"],
        event["reason"],
        event["message"],
    )


@dataclass
class _Bucket:
    """The new series an object may still start now, as of ``at``."""

    tokens: float
    at: float
    #: Whether a drop since the bucket was last full has been logged.
    said: bool = False


class EventRecorder:
    """An :class:`~craft_operator.reconciler.ports.EventSink` that posts through the API."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        capacity: int = 10_000,
        window: float = 600.0,
        patch_interval: float = 30.0,
        max_series: int = 4096,
        burst: int = 25,
        refill: float = 300.0,
    ) -> None:
        self._kube = kube
        self._burst, self._refill = burst, refill
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        #: New events an object posted past its burst (dropped, never queued).
        self.filtered = 0
        self._queue: asyncio.Queue[tuple[SeriesKey, dict[str, Any] | None]] = asyncio.Queue(
            maxsize=capacity
        )
        self._task: asyncio.Task[None] | None = None
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._window, self._interval, self._max_series = window, patch_interval, max_series
        self.posted = 0
        self.dropped = 0
        #: Repeats folded into a series (each would have been a write of its own).
        self.folded = 0
        #: PATCHes sent to carry them.
        self.patched = 0

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Queue an event about ``body`` (dropped and counted if the queue is full), or
        count it in the series of an equal event posted within the window."""
        now = datetime.now(UTC)
        event = build_event(body, type=type, reason=reason, message=message, now=now)
        key, clock = _series_key(event), time.monotonic()
        series = self._series.get(key)
        if series is not None and clock - series.seen < self._window:
            self._series.move_to_end(key)
            series.seen, series.last = clock, event["lastTimestamp"]
            series.pending += 1
            self.folded += 1
            if clock - series.written >= self._interval:
                self._enqueue(key, None, series)
            return
        if not self._allowed((key[0] or key[1], type), clock, key[1]):
            self.filtered += 1
            return
        self._series[key] = _Series(event["metadata"]["namespace"] or "", clock, clock)
        while len(self._series) > self._max_series:
            self._series.popitem(last=False)
        self._enqueue(key, event, None)

    def _allowed(self, budget: tuple[str, str], clock: float, what: str) -> bool:
        """Take a token of ``budget`` (an object and an event type) for a new series, if
        one is left; the first drop since the budget was full is logged."""
        bucket = self._buckets.get(budget)
        if bucket is None:
            bucket = self._buckets[budget] = _Bucket(float(self._burst), clock)
            while len(self._buckets) > self._max_series:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(budget)
            earned = (clock - bucket.at) / self._refill if self._refill > 0 else self._burst
            bucket.tokens = min(float(self._burst), bucket.tokens + earned)
            bucket.at = clock
            if bucket.tokens >= self._burst:
                bucket.said = False
        if bucket.tokens < 1:
            if not bucket.said:
                bucket.said = True
                logger.warning(
                    "%s events about %s come faster than %d at once and then one per %.0f s:"
                    " dropping them until it slows down",
                    budget[1],
                    what,
                    self._burst,
                    self._refill,
                )
            return False
        bucket.tokens -= 1
        return True

    def _enqueue(
        self, key: SeriesKey, event: dict[str, Any] | None, series: _Series | None
    ) -> None:
        if series is not None and (series.queued or series.name is None):
            return  # a write of this series is on its way; it will carry the repeats
        try:
            self._queue.put_nowait((key, event))
        except asyncio.QueueFull:
            self.dropped += 1
            if event is not None:
                self._forget(key)  # its repeats would wait for a create that never comes
            return
        if series is not None:
            series.queued = True

    def start(self) -> None:
        """Start posting queued events."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-poster")

    async def drained(self) -> None:
        """Return once every event queued so far is posted (or given up on)."""
        await self._queue.join()

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Post what is queued and the repeats not yet written (for up to
        ``drain_timeout`` seconds), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._final_drain(), drain_timeout)
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _final_drain(self) -> None:
        await self.drained()
        self._flush_due(force=True)
        await self.drained()

    async def _run(self) -> None:
        period = max(self._interval, 1.0)  # how often held repeats are looked for
        scan = time.monotonic() + period
        while True:
            try:
                timeout = max(0.0, scan - time.monotonic())
                key, event = await asyncio.wait_for(self._queue.get(), timeout)
            except TimeoutError:
                pass
            else:
                try:
                    await self._write(key, event)
                except Exception as exc:  # one bad write must not end the poster
                    self._failed(key, event, exc)
                finally:
                    self._queue.task_done()
            if time.monotonic() >= scan:  # repeats held while the poster was busy or idle
                self._flush_due(force=False)
                scan = time.monotonic() + period

    def _failed(self, key: SeriesKey, event: dict[str, Any] | None, exc: Exception) -> None:
        """A write failed other than with an API error (the client could not log in, say):
        the event is dropped and its series forgotten, as for a refused one. Only the type
        is logged: such an error may quote what it failed on."""
        self.dropped += 1
        logger.warning("could not post event %s: %s", key[3], type(exc).__name__)
        if event is not None:
            self._forget(key)

    def _flush_due(self, *, force: bool) -> None:
        """Queue a PATCH for every series with repeats not written (due ones unless
        ``force``)."""
        clock = time.monotonic()
        for key, series in list(self._series.items()):
            if series.pending and (force or clock - series.written >= self._interval):
                self._enqueue(key, None, series)

    async def _write(self, key: SeriesKey, event: dict[str, Any] | None) -> None:
        series = self._series.get(key)
        if event is not None:
            await self._create(key, event, series)
        elif series is not None:
            series.queued = False
            if series.pending and series.name is not None:
                await self._patch(key, series)

    def _forget(self, key: SeriesKey) -> None:
        """Drop a series whose first event was not posted: the next repeat is posted anew
        (folded into it, it would never be: repeats are written as a PATCH of that event)."""
        series = self._series.get(key)
        if series is not None and series.name is None:
            del self._series[key]

    async def _create(self, key: SeriesKey, event: dict[str, Any], series: _Series | None) -> None:
        try:
            created = await self._kube.create(EVENTS, event)
        except ApiError as exc:
            self.dropped += 1
            # The API server away (restarting, say) is said by the pass it cuts short, at
            # INFO: one warning per event it also cuts would bury that line.
            level = logging.INFO if exc.away else logging.WARNING
            logger.log(level, "could not post event %s: %s", event["reason"], exc)
            if series is not None and self._series.get(key) is series:
                self._forget(key)
            return
        self.posted += 1
        if series is not None:
            series.name = created.get("metadata", {}).get("name")
            series.written = time.monotonic()

    async def _patch(self, key: SeriesKey, series: _Series) -> None:
        count, pending = series.count + series.pending, series.pending
        patch = {"count": count, "lastTimestamp": series.last}
        assert series.name is not None
        try:
            await self._kube.patch(EVENTS, series.namespace, series.name, patch)
        except NotFoundError:
            self._series.pop(key, None)  # expired (events live an hour): the next is new
            return
        except ApiError as exc:
            logger.warning("could not update event series %s: %s", key[3], exc)
            return
        series.count, series.pending = count, series.pending - pending
        series.written = time.monotonic()
        self.patched += 1

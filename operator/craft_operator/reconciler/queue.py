"""A keyed work queue: each key is reconciled by one worker at a time, never twice at once.

Like client-go's rate-limited queue: adding a key that is already waiting merges with it
(the earliest due time wins); adding a key that is being processed runs it once more
afterwards; a failure retries the key with exponential backoff and jitter; a success may
ask for a later visit (``requeue_after``). Handlers therefore see the latest state, and a
burst of events for one object costs one reconcile, not one per event.

A standby replica pauses the queue (:meth:`WorkQueue.pause`): no pass runs, and none that was
running goes on, until :meth:`WorkQueue.resume`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
Handler = Callable[[K], Awaitable[float | None]]

logger = logging.getLogger(__name__)


class RetryableError(Exception):
    """A failure the queue retries: with its backoff, or after ``retry_after`` seconds if
    given (the failure still counts, so the backoff goes on growing after it); never later
    than ``retry_by`` seconds if given."""

    #: Seconds a key's passes may go on failing with this error (expected by the queue)
    #: before each failure is logged as an error, not as news; ``None``: never.
    error_after: float | None = None

    def __init__(
        self, message: str, *, retry_after: float | None = None, retry_by: float | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.retry_by = retry_by


class Backoff:
    """Exponential delays with jitter: ``base * 2**n`` capped at ``cap``, n = failures so far."""

    def __init__(self, base: float = 1.0, cap: float = 300.0, jitter: float = 0.1) -> None:
        self.base, self.cap, self.jitter = base, cap, jitter

    def delay(self, failures: int) -> float:
        """The delay before attempt ``failures + 1``."""
        # Clamp the exponent: 2.0 ** 1024 raises OverflowError (and would end the worker).
        raw = min(self.cap, self.base * 2.0 ** min(max(0, failures - 1), 1000))
        jittered = raw * (1 + random.uniform(-self.jitter, self.jitter))  # noqa: S311 -- not crypto
        return min(self.cap, jittered)


class WorkQueue(Generic[K]):
    """Run ``handler(key)`` for added keys with ``concurrency`` workers."""

    def __init__(
        self,
        handler: Handler[K],
        *,
        concurrency: int = 8,
        backoff: Backoff | None = None,
        expected: tuple[type[Exception], ...] = (),
        waits_out: tuple[type[Exception], ...] = (),
    ) -> None:
        self._handler = handler
        self._expected = expected
        #: Failures a :meth:`wake` does not cut short (see there).
        self._waits_out = waits_out
        self._concurrency = concurrency
        self._backoff = backoff or Backoff()
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._processing: set[K] = set()
        #: When each pass running now started (the event loop's time).
        self._started_at: dict[K, float] = {}
        self._dirty: set[K] = set()
        #: Per key whose pass runs now, the checks of the events seen meanwhile that may be
        #: echoes of that pass's own writes (see :meth:`add`).
        self._echoes: dict[K, list[Callable[[], bool]]] = {}
        self._forgotten: set[K] = set()
        self._failures: dict[K, int] = {}
        #: What the passes of each key in ``_failures`` failed with, in this run of failures,
        #: and when each first (the event loop's time).
        self._failed_with: dict[K, dict[type[Exception], float]] = {}
        #: When :meth:`retry_now` last ran each key that has not succeeded since.
        self._rushed: dict[K, float] = {}
        self._counter = itertools.count()
        self._wakeup = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._started = False
        self._paused = False
        self._draining = False
        #: Set when no pass is in progress (what a stop with a grace waits for).
        self._drained = asyncio.Event()
        self.processed = 0
        self.failed = 0

    def __len__(self) -> int:
        return len(self._due)

    def backlog(self) -> int:
        """Keys that are due now but that no worker has started yet."""
        now = asyncio.get_running_loop().time()
        return sum(1 for due in self._due.values() if due <= now)

    def longest_running(self) -> float:
        """Seconds the oldest pass still running has run (0 when none runs). Every step of
        a pass is bounded (exec, database, API calls), so minutes mean a stuck worker."""
        if not self._started_at:
            return 0.0
        return max(0.0, asyncio.get_running_loop().time() - min(self._started_at.values()))

    def failures(self, key: K) -> int:
        """Failures of ``key`` in a row (0 after a success)."""
        return self._failures.get(key, 0)

    def add(self, key: K, delay: float = 0.0, *, echo: Callable[[], bool] | None = None) -> None:
        """Schedule ``key`` in ``delay`` seconds (sooner if it is already due earlier).

        ``echo``, for an event that arrives while the key's pass runs: whether the event is
        the echo of one of that pass's own writes, asked when the pass ends (its writes'
        answers are in by then). The key runs again only if it is not: the watch event of a
        write often arrives before the write's answer, and a pass that reads back what it
        has just written does nothing but cost.
        """
        if echo is not None and delay <= 0 and key in self._processing:
            self._echoes.setdefault(key, []).append(echo)
            return
        due = asyncio.get_running_loop().time() + max(0.0, delay)
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._counter), key))
        if len(self._heap) > 2 * len(self._due) + 64:
            # A visit moved earlier leaves its later entry behind until its own time (up
            # to a resync away): drop those, at most once per as many adds as keys due.
            self._heap = [entry for entry in self._heap if self._due.get(entry[2]) == entry[0]]
            heapq.heapify(self._heap)
        self._wakeup.set()

    def wake(self, key: K) -> None:
        """Visit ``key`` now for news of its own work in the background (a library sync or
        a PAT delivery that ended), as :meth:`add` does, unless its passes have failed with
        one of ``waits_out`` (the API server away) since its last success and its retry is
        scheduled: that retry, or :meth:`retry_now` once the cause is over, reads the news.
        A visit now would fail alike and grow its backoff a step more each time."""
        errors = self._failed_with.get(key)
        waiting = key in self._due and key not in self._processing
        if waiting and errors and any(issubclass(error, self._waits_out) for error in errors):
            return
        self.add(key)

    def retry_now(
        self, cause: type[Exception], which: Callable[[K], bool], *, at_most_every: float = 10.0
    ) -> int:
        """Visit now, their failures forgotten, the keys ``which`` picks that failed with
        ``cause`` since their last success: what failed them is over (the API server serves
        again), so neither the wait nor the backoff their failures grew stands, even if
        their last pass failed otherwise as it ended (a restarted API server refuses
        requests for a moment, until its authorizer has loaded). A key is rushed so at most
        once in ``at_most_every`` seconds until it succeeds: a stream that flaps while the
        API server goes on failing a key must not undo the key's backoff. How many."""
        now = asyncio.get_running_loop().time()
        keys = [
            key
            for key, errors in self._failed_with.items()
            if any(issubclass(error, cause) for error in errors)
            and which(key)
            and now - self._rushed.get(key, -math.inf) >= at_most_every
        ]
        for key in keys:
            self._failures.pop(key, None)
            self._failed_with.pop(key, None)
            self._rushed[key] = now
            self.add(key)
        return len(keys)

    def _log_expected(
        self, key: K, exc: Exception, failures: int, delay: float, now: float
    ) -> None:
        """Log a failure the queue expects: as news (no traceback), or as an error once its
        kind has failed the key's passes for its ``error_after`` seconds."""
        limit = exc.error_after if isinstance(exc, RetryableError) else None
        lasted = now - self._failed_with.get(key, {}).get(type(exc), now)
        if limit is not None and lasted >= limit:
            logger.error(
                "%s; failing so for %.0fs; retry %d in %.1fs", exc, lasted, failures, delay
            )
        else:
            logger.info("%s; retry %d in %.1fs", exc, failures, delay)

    def forget(self, key: K) -> None:
        """Drop ``key``: its backoff history and any pending visit, also one its running
        pass would ask for (the object is gone: a later ``add`` starts afresh)."""
        self._due.pop(key, None)
        self._failures.pop(key, None)
        self._failed_with.pop(key, None)
        self._rushed.pop(key, None)
        self._dirty.discard(key)
        self._echoes.pop(key, None)
        if key in self._processing:
            self._forgotten.add(key)

    @property
    def paused(self) -> bool:
        """Whether the queue is paused (keys are recorded, but no worker runs)."""
        return self._paused

    def start(self) -> None:
        """Start the workers in the running loop (if paused: once it resumes)."""
        self._started = True
        if not self._paused:
            self._spawn_workers()

    async def stop(self, grace: float = 0.0) -> None:
        """Stop the workers: no new pass starts; passes in progress get ``grace`` seconds
        to end (a pass cut off halfway converges on the next start, but one that ends
        leaves nothing half done), then are cancelled."""
        self._started = False
        if grace > 0 and self._workers:
            self._draining = True
            self._wakeup.set()  # a worker waiting for a key's time sees the drain, takes none
            self._drained.clear()
            if self._processing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._drained.wait(), grace)
        await self._cancel_workers()
        self._draining = False

    async def pause(self) -> None:
        """Stop acting until :meth:`resume`: passes in progress are cancelled, as if the
        process had died there (the reconciler converges from any such point), and are
        visited again after the pause unless :meth:`clear` drops them."""
        self._paused = True
        interrupted = self._processing - self._forgotten
        await self._cancel_workers()
        for key in interrupted:
            self.add(key)

    def resume(self) -> None:
        """Work again after :meth:`pause` (the workers start if the queue was started)."""
        self._paused = False
        if self._started and not self._workers:
            self._spawn_workers()

    def clear(self) -> None:
        """Drop every pending visit and all backoff history (the keys' state is unknown)."""
        self._heap.clear()
        self._due.clear()
        self._failures.clear()
        self._failed_with.clear()
        self._rushed.clear()
        self._dirty.clear()
        self._echoes.clear()
        self._forgotten |= self._processing

    def _spawn_workers(self) -> None:
        for index in range(self._concurrency):
            self._workers.append(asyncio.create_task(self._work(), name=f"reconcile-{index}"))

    async def _cancel_workers(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    async def _next(self) -> K:
        loop = asyncio.get_running_loop()
        while True:
            if self._draining:
                await loop.create_future()  # stopping: wait to be cancelled, take no new key
            self._wakeup.clear()
            while self._heap:
                due, _, key = self._heap[0]
                if self._due.get(key) != due:
                    heapq.heappop(self._heap)  # superseded by an earlier visit, or forgotten
                    continue
                wait = due - loop.time()
                if wait > 0:
                    break
                heapq.heappop(self._heap)
                del self._due[key]
                if key in self._processing:
                    self._dirty.add(key)
                    continue
                return key
            timeout = (self._heap[0][0] - loop.time()) if self._heap else None
            # Not asyncio.wait_for: on 3.11 it swallows a cancellation that comes as the
            # event is set (a stop wakes the workers, then cancels them at once).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    async def _work(self) -> None:
        while True:
            key = await self._next()
            self._processing.add(key)
            self._started_at[key] = asyncio.get_running_loop().time()
            self._forgotten.discard(key)
            try:
                requeue_after = await self._handler(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failed += 1
                failures = self._failures.get(key, 0) + 1
                now = asyncio.get_running_loop().time()
                if key not in self._forgotten:  # (gone meanwhile: nothing to remember)
                    self._failures[key] = failures
                    self._failed_with.setdefault(key, {}).setdefault(type(exc), now)
                delay = self._backoff.delay(failures)
                if isinstance(exc, RetryableError) and exc.retry_after is not None:
                    delay = exc.retry_after  # counted as a failure all the same
                if isinstance(exc, RetryableError) and exc.retry_by is not None:
                    delay = min(delay, exc.retry_by)
                if isinstance(exc, self._expected):
                    self._log_expected(key, exc, failures, delay, now)
                else:
                    logger.exception(
                        "reconcile of %s failed unexpectedly; retry %d in %.1fs",
                        key,
                        failures,
                        delay,
                    )
                if key not in self._forgotten:
                    self.add(key, delay)
            else:
                self.processed += 1
                self._failures.pop(key, None)
                self._failed_with.pop(key, None)
                self._rushed.pop(key, None)
                if requeue_after is not None and key not in self._forgotten:
                    self.add(key, requeue_after)
            finally:
                self._processing.discard(key)
                self._started_at.pop(key, None)
                if not self._processing:
                    self._drained.set()
                echoes = self._echoes.pop(key, ())
                if key in self._dirty or not all(echo() for echo in echoes):
                    self._dirty.discard(key)
                    self.add(key)
                self._forgotten.discard(key)

"""Exec-mode library syncs in a bounded pool of their own, apart from the reconcile workers.

A sync talks to the sandbox pod, which the agent controls: it can be slow, stop reading its
input, or be stopped outright. So a reconcile pass never waits for one. It asks the pool to
start a sync (:meth:`LibrarySyncPool.submit`), reports progress, and returns; the pool runs
at most ``concurrency`` syncs at once, each within a whole-sync budget, and wakes the
sandbox (:attr:`LibrarySyncPool.wake`) when its sync ends, so that the next pass collects
the outcome (:meth:`LibrarySyncPool.take`). A hostile pod holds one slot, for at most one
command's timeout at a time, and never a reconcile worker.

A sync that failed in a way that may pass is retried with exponential backoff
(:meth:`LibrarySyncPool.retry_in`), kept here because the passes in between succeed. One
whose commands the pod ran and failed (a full disk, files the agent changed) is retried
only :data:`POD_FAILURES` times in a row for the same attempt: each try may download the
whole library again and send it through the API server. Then its failure is final, until
the revision, the pod or the configuration (the attempt) changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from craft_operator.library import ExecCommandFailedError, LibrarySyncError, SyncResult
from craft_operator.reconciler.queue import Backoff

logger = logging.getLogger(__name__)

#: A sandbox: (namespace, name).
Key = tuple[str, str]
#: Failures in a row of one attempt's commands in the pod before the failure is final.
POD_FAILURES = 3


class SyncTimedOutError(LibrarySyncError):
    """The whole sync took longer than CRAFT_LIBRARY_SYNC_TIMEOUT; it was abandoned."""

    reason = "SyncTimedOut"
    retryable = True


@dataclass(frozen=True)
class Outcome:
    """How one sync ended: its result, or the error to report."""

    attempt: str
    result: SyncResult | None = None
    error: LibrarySyncError | None = None


@dataclass
class _Job:
    uid: str
    attempt: str
    task: asyncio.Task[None]
    running: bool = False


class LibrarySyncPool:
    """Runs library syncs, at most ``concurrency`` at a time; see the module docstring."""

    def __init__(
        self,
        concurrency: int = 4,
        *,
        budget_seconds: float = 1800.0,
        backoff: Backoff | None = None,
    ) -> None:
        """``budget_seconds`` bounds one whole sync; ``backoff`` spaces retries of failures."""
        self.concurrency = concurrency
        self._budget = budget_seconds
        self._backoff = backoff or Backoff(base=2.0, cap=300.0)
        self._slots: asyncio.Semaphore | None = None
        self._jobs: dict[Key, _Job] = {}
        self._outcomes: dict[Key, tuple[str, Outcome]] = {}
        self._failures: dict[Key, tuple[int, float]] = {}
        self._pod_failures: dict[Key, tuple[str, int]] = {}
        #: Called with a sandbox's key when its sync ends (the work queue's ``add``).
        self.wake: Callable[[Key], None] | None = None
        #: Most syncs that ever ran at once (for tests and metrics).
        self.peak = 0
        self._running = 0

    def busy(self, key: Key, uid: str) -> bool:
        """Whether a sync of this sandbox (this very object, by uid) is queued or running."""
        job = self._jobs.get(key)
        return job is not None and job.uid == uid

    @property
    def running(self) -> int:
        """Syncs running now (not those waiting for a slot)."""
        return self._running

    def take(self, key: Key, uid: str) -> Outcome | None:
        """The outcome of the sandbox's last sync, once (None if none is waiting)."""
        stored = self._outcomes.get(key)
        if stored is None or stored[0] != uid:
            return None
        del self._outcomes[key]
        return stored[1]

    def retry_in(self, key: Key) -> float:
        """Seconds before the sandbox's next sync may start (0: now)."""
        failures = self._failures.get(key)
        if failures is None:
            return 0.0
        return max(0.0, failures[1] - asyncio.get_running_loop().time())

    def submit(
        self, key: Key, uid: str, attempt: str, work: Callable[[], Awaitable[SyncResult]]
    ) -> None:
        """Start ``work`` (one sync) for the sandbox once a slot is free, unless one runs."""
        if key in self._jobs:
            return
        task = asyncio.create_task(self._run(key, work), name=f"library-sync-{key}")
        self._jobs[key] = _Job(uid, attempt, task)

    def forget(self, key: Key) -> None:
        """The sandbox is gone: cancel its sync and drop what is known of it."""
        job = self._jobs.pop(key, None)
        if job is not None:
            job.task.cancel()
        self._outcomes.pop(key, None)
        self._failures.pop(key, None)
        self._pod_failures.pop(key, None)

    async def drain(self, grace: float) -> None:
        """Let the syncs under way end within ``grace`` seconds, then cancel the rest (the
        replica stops; a standby may take over its sandboxes next)."""
        running = [job.task for job in self._jobs.values()]
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        await self.close()

    async def close(self) -> None:
        """Cancel every sync and forget every outcome (the operator stops, or stands by)."""
        jobs, self._jobs = list(self._jobs.values()), {}
        self._outcomes.clear()
        self._failures.clear()
        self._pod_failures.clear()
        for job in jobs:
            job.task.cancel()
        await asyncio.gather(*(job.task for job in jobs), return_exceptions=True)

    async def _run(self, key: Key, work: Callable[[], Awaitable[SyncResult]]) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        job = self._jobs[key]
        try:
            async with self._slots:
                job.running = True
                self._running += 1
                self.peak = max(self.peak, self._running)
                try:
                    outcome = await self._attempt(job.attempt, work)
                finally:
                    self._running -= 1
        except asyncio.CancelledError:
            if self._jobs.get(key) is job:
                del self._jobs[key]
            raise
        if self._jobs.get(key) is not job:
            return  # forgotten meanwhile
        del self._jobs[key]
        outcome = self._bounded(key, outcome)
        self._outcomes[key] = (job.uid, outcome)
        self.count(key, outcome)
        if self.wake is not None:
            self.wake(key)

    async def _attempt(self, attempt: str, work: Callable[[], Awaitable[SyncResult]]) -> Outcome:
        try:
            async with asyncio.timeout(self._budget):
                return Outcome(attempt, result=await work())
        except LibrarySyncError as exc:
            return Outcome(attempt, error=exc)
        except TimeoutError:
            message = f"the sync did not finish within {self._budget:.0f}s and was abandoned"
            return Outcome(attempt, error=SyncTimedOutError(message))
        except Exception:
            logger.exception("the library sync failed unexpectedly")
            error = LibrarySyncError("the sync failed unexpectedly (see the operator's log)")
            error.retryable = True
            return Outcome(attempt, error=error)

    def _bounded(self, key: Key, outcome: Outcome) -> Outcome:
        """The outcome, its failure made final if it is the attempt's :data:`POD_FAILURES`-th
        in a row of commands the pod ran and failed."""
        error = outcome.error
        if not isinstance(error, ExecCommandFailedError) or not error.retryable:
            self._pod_failures.pop(key, None)
            return outcome
        attempt, failures = self._pod_failures.get(key, (outcome.attempt, 0))
        failures = failures + 1 if attempt == outcome.attempt else 1
        if failures < POD_FAILURES:
            self._pod_failures[key] = (outcome.attempt, failures)
            return outcome
        self._pod_failures.pop(key, None)
        final = ExecCommandFailedError(
            f"{error.message}; failed {failures} times in a row, so not retried until the "
            "library has a new revision, the sandbox a new pod or the library a new "
            "configuration",
            retryable=False,
        )
        return Outcome(outcome.attempt, error=final)

    def count(self, key: Key, outcome: Outcome) -> None:
        """Count a sync's outcome towards the sandbox's retry backoff (:meth:`retry_in`): a
        retryable failure lengthens it, anything else resets it. Job mode's syncs, which
        run outside the pool, are counted here too."""
        if outcome.error is None or not outcome.error.retryable:
            self._failures.pop(key, None)
            return
        failures = self._failures.get(key, (0, 0.0))[0] + 1
        delay = self._backoff.delay(failures)
        self._failures[key] = (failures, asyncio.get_running_loop().time() + delay)

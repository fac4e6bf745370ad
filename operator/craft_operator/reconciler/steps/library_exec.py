"""Exec mode of the user library, as a reconcile pass sees it: start, watch, collect a sync.

The sync itself runs in the :class:`~craft_operator.reconciler.library_pool.LibrarySyncPool`;
a pass never waits for it. It starts one when the revision, pod or configuration moved,
reports ``UserLibrarySynced`` ``Unknown``/``Syncing`` while it runs (a library already
synced stays ``True`` meanwhile), and, once the pool wakes the sandbox, records the outcome
in ``status.userLibrary``, the condition and an event.
"""

from __future__ import annotations

from craft_operator.api.models import ConditionStatus, UserLibraryStatus
from craft_operator.library import LibraryLocation, LibrarySyncError, SyncResult
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.library_pool import Outcome
from craft_operator.reconciler.pod_guard import pod_check
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.step import Pass
from craft_operator.reconciler.steps.library_attempt import (
    RESYNCED,
    SYNCED,
    Attempt,
    synced_message,
    told,
)
from craft_operator.status import USER_LIBRARY_SYNCED, ConditionState

NORMAL, WARNING = "Normal", "Warning"
#: Seconds the status of a pass that started a sync waits for the pass collecting it.
STATUS_HOLD = 2.0


def step(p: Pass, location: LibraryLocation, attempt: Attempt) -> None:
    """Collect a finished sync of this attempt, or start one, or report the one running."""
    s, run, sandbox = p.services, p.run, p.sandbox
    assert p.pod is not None
    pool = s.library_pool
    uid = sandbox.metadata.uid or ""
    outcome = pool.take(run.key, uid)
    if outcome is not None and outcome.attempt == attempt.key:
        _record(p, outcome, attempt)
        return
    if pool.busy(run.key, uid):
        _syncing(run, "a library sync is queued or running")
        run.keep_holding()  # a pass on the echo of the last one's writes adds nothing new
        return  # the pool wakes this sandbox when it ends
    wait = pool.retry_in(run.key)
    if wait > 0:
        run.revisit(after=wait)
        return
    namespace, name = p.pod["metadata"].get("namespace", ""), p.pod["metadata"]["name"]
    # Run maybe much later (queued behind others): only into this very pod.
    check = pod_check(s.cache, p.pod, uid)
    pool.submit(
        run.key,
        uid,
        attempt.key,
        lambda: s.library.sync(
            sandbox,
            location,
            namespace=namespace,
            pod=name,
            pod_uid=attempt.pod_uid,
            check=check,
        ),
    )
    _syncing(run, "a library sync is queued or running")
    # Most syncs end within moments: the pass that collects this one writes the status of
    # both passes at once (or the status is written after STATUS_HOLD if it takes longer).
    run.hold(STATUS_HOLD)


def _syncing(run: Run, message: str) -> None:
    # A library already synced stays True, and a failure stays False (its message says it
    # is retried) until the sync ends: the condition moves once per outcome, not per try.
    if not run.condition_is(USER_LIBRARY_SYNCED, ConditionStatus.TRUE, ConditionStatus.FALSE):
        run.set(ConditionState.unknown(USER_LIBRARY_SYNCED, "Syncing", message))


def _record(p: Pass, outcome: Outcome, attempt: Attempt) -> None:
    s, run = p.services, p.run
    current = (run.status.user_library or UserLibraryStatus()).model_copy()
    if outcome.error is not None:
        said = told(p, outcome.error.message, outcome.error.reason)
        _failed(s, run, current, outcome.error, attempt, said)
    elif outcome.result is not None:
        _succeeded(s, run, outcome.result, attempt)


def _failed(
    s: Services,
    run: Run,
    current: UserLibraryStatus,
    exc: LibrarySyncError,
    attempt: Attempt,
    said: str,
) -> None:
    s.metrics.sync_failed(exc.reason)
    current.last_error = said[:1000]
    if exc.retryable:
        current.failed_attempt = None
        run.revisit(after=s.library_pool.retry_in(run.key))
    else:
        current.failed_attempt = attempt.key
    run.status.user_library = current
    message = said + ("; retried with backoff" if exc.retryable else "")
    run.set(ConditionState.false(USER_LIBRARY_SYNCED, exc.reason, message))
    s.events.post(run.body, type=WARNING, reason=f"Library{exc.reason}", message=message)


def _succeeded(s: Services, run: Run, result: SyncResult, attempt: Attempt) -> None:
    # Job mode's Job (one may still run after a switch to Exec) and numbering are kept.
    kept = run.status.user_library or UserLibraryStatus()
    synced = UserLibraryStatus(
        job=kept.job,
        job_sequence=kept.job_sequence,
        observed_revision=attempt.revision or None,
        last_sync_time=run.moment(),
        files=result.files,
        bytes=result.bytes,
        bytes_transferred=result.bytes_transferred,
        duration_seconds=round(result.duration_seconds, 3),
        skipped=len(result.skipped),
        pod_uid=attempt.pod_uid,
        config_hash=attempt.config,
    )
    run.status.user_library = synced
    message = synced_message(synced)
    reason = SYNCED
    if result.distrust is not None:
        reason = RESYNCED
        message = f"{result.distrust.message} ({result.distrust.reason}); {message}"
        s.events.post(
            run.body,
            type=WARNING,
            reason="LibraryManifestUntrusted",
            message=result.distrust.message,
        )
    run.set(ConditionState.true(USER_LIBRARY_SYNCED, reason, message))
    s.metrics.sync_finished(result.bytes_transferred, result.duration_seconds)
    if result.copied or result.deleted:
        s.events.post(run.body, type=NORMAL, reason="LibrarySynced", message=result.summary())
    if result.skipped:
        shown = ", ".join(repr(item.key[:80]) for item in result.skipped[:5])
        s.events.post(
            run.body,
            type=WARNING,
            reason="LibraryKeysSkipped",
            message=f"{len(result.skipped)} S3 keys skipped as unsafe, e.g. {shown}",
        )

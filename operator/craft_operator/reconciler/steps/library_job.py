"""Job mode of UserLibrarySynced, as a pass sees it: collect a finished sync Job, start the next.

The Jobs themselves (their manifest, credentials, creation and outcome) are
:mod:`craft_operator.reconciler.sync_jobs`; this module decides when one runs and what the
status says about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import ConditionStatus, UserLibraryStatus
from craft_operator.builders.library_job import library_claim_name
from craft_operator.kube import kinds
from craft_operator.library import LibraryLocation, LibrarySyncError
from craft_operator.reconciler import egress, sync_jobs
from craft_operator.reconciler.children import ForeignObjectError, controlled_by
from craft_operator.reconciler.library_pool import Outcome
from craft_operator.reconciler.step import Pass
from craft_operator.reconciler.steps.library_attempt import (
    SYNCED,
    Attempt,
    refused_revision,
    still_current,
    synced_message,
    told,
)
from craft_operator.reconciler.steps.library_volume import grown_since
from craft_operator.status import USER_LIBRARY_SYNCED, ConditionState

JOB, POD, PVC = kinds.JOB, kinds.POD, kinds.PVC
#: UserLibrarySynced's reason while the library volume is being deleted.
VOLUME_TERMINATING = "VolumeTerminating"


async def sync(p: Pass, location: LibraryLocation, attempt: Attempt) -> None:
    """Collect the outcome of the Job that ran, then start a Job if the library is behind
    (after a retryable failure, once its backoff has passed)."""
    current = (p.run.status.user_library or UserLibraryStatus()).model_copy()
    if current.job:
        collected = await _collect(p, current, location)
        if collected is None:
            return  # the Job's watch events bring us back when it ends
        current = collected
        p.run.status.user_library = current
    if still_current(p.run, current, attempt) or current.failed_attempt == attempt.key:
        return
    if refused_revision(p, current, attempt):
        return
    # The False condition of the failure stays meanwhile; its message says it is retried.
    wait = p.services.library_pool.retry_in(p.run.key)
    if wait > 0:
        p.run.revisit(after=wait)
        return
    if _volume_terminating(p):
        return
    await _start(p, current, location, attempt)


def _volume_terminating(p: Pass) -> bool:
    """Whether the library volume is being deleted (by someone: the operator never deletes
    it while the sandbox lives). No Job could mount it: the next sync waits for the new
    volume, which follows once the pod that holds the old one (pvc-protection) is gone; the
    condition and an event say so, rather than a Job unschedulable until its deadline."""
    namespace = p.sandbox.metadata.namespace or ""
    claim = p.services.cache.get(PVC.name, namespace, library_claim_name(p.sandbox))
    if claim is None or not claim["metadata"].get("deletionTimestamp"):
        return False
    message = (
        f"the library volume {library_claim_name(p.sandbox)} is being deleted: no sync Job "
        "can mount it; the library is synced into a new one once it is gone, which waits "
        "for the pod that mounts it (delete the pod to hurry it)"
    )
    said = p.run.condition(USER_LIBRARY_SYNCED)
    if said is None or said.reason != VOLUME_TERMINATING:
        p.event(VOLUME_TERMINATING, message, warning=True)  # once, not on every pass
    p.run.set(ConditionState.false(USER_LIBRARY_SYNCED, VOLUME_TERMINATING, message))
    return True


async def _collect(
    p: Pass, current: UserLibraryStatus, location: LibraryLocation
) -> UserLibraryStatus | None:
    """The status once the running Job's outcome is recorded; ``None`` while it runs."""
    s, namespace, running = p.services, p.sandbox.metadata.namespace or "", current.job or ""
    job = s.cache.get(JOB.name, namespace, running)
    if job is not None and not controlled_by(job, p.sandbox.metadata.uid):
        job = None  # someone else's Job by that name: never read as ours, nor deleted
    elif running and (job is None or not sync_jobs.watched(job)):
        # Gone, or out of the watches' sight (its labels edited): read, so that no second
        # Job starts beside it, and read again until it ends (no watch event will say so).
        job = await sync_jobs.read_back(s.kube, s.cache, p.sandbox, running)
        if job is not None and not sync_jobs.watched(job):
            p.run.revisit(after=sync_jobs.UNWATCHED_READ_SECONDS)
    outcome = sync_jobs.read_outcome(s.cache, job) if job is not None else None
    if job is not None and outcome is not None and not outcome.result:
        # The Job's end can arrive before its pod's: read the pods once, directly.
        selector = f"{sync_jobs.JOB_NAME_LABEL}={running}"
        for job_pod in await s.kube.list(POD.api, namespace, label_selector=selector):
            # Only the Job's own: the watches never see a pod someone labelled so change
            # or go, so one put here would stay in the cache for good.
            if controlled_by(job_pod, job["metadata"].get("uid")):
                s.cache.put(POD.name, job_pod)
        outcome = sync_jobs.read_outcome(s.cache, job)
    if job is not None and outcome is None:
        await _running(p, job, location)
        return None
    current.job = None
    if job is None or outcome is None:
        return current  # the Job is gone: start over
    await sync_jobs.remove_job(s.kube, s.cache, job)
    if outcome.succeeded:
        return _succeeded(p, current, outcome)
    return _failed(p, current, outcome)


async def _running(p: Pass, job: dict[str, Any], location: LibraryLocation) -> None:
    """The Job runs: see that it has its credentials, and say why its pod waits, if it
    does (an image not pulled, unschedulable), not only that it runs."""
    if not await _has_its_credentials(p, job, location):
        return
    detail = sync_jobs.waiting(p.services.cache, job)
    name = job["metadata"]["name"]
    _syncing(p, f"sync Job {name} is running" + (f"; its pod waits: {detail}" if detail else ""))


async def _has_its_credentials(p: Pass, job: dict[str, Any], location: LibraryLocation) -> bool:
    """With scoped credentials (CRAFT_LIBRARY_JOB_ROLE_ARN), make sure the running Job has
    its Secret, once per Job and process: an operator stopped between the Job's creation
    and its Secret's (or the Secret deleted) left a Job whose pod cannot start until its
    deadline. ``False`` if it could not be made (said on the condition, retried)."""
    s = p.services
    uid = str(job["metadata"].get("uid", ""))
    if not s.settings.library_job_role_arn or p.memory.job_secrets.get(p.run.key) == uid:
        return True
    if not await sync_jobs.has_job_secret(s.kube, job):
        name = job["metadata"]["name"]
        try:
            scoped = await sync_jobs.scoped_credentials(s.settings, location, job)
            if scoped is not None:
                await sync_jobs.create_job_secret(s.kube, job, scoped)
        except LibrarySyncError as exc:
            p.fail(USER_LIBRARY_SYNCED, exc.reason, exc.message)
            return False
        except ForeignObjectError as exc:
            p.fail(USER_LIBRARY_SYNCED, exc.reason(exc.kind), str(exc))
            return False
        p.event("LibrarySyncCredentials", f"gave sync Job {name} the credentials it lacked")
    p.memory.job_secrets[p.run.key] = uid
    return True


async def _start(
    p: Pass, current: UserLibraryStatus, location: LibraryLocation, attempt: Attempt
) -> None:
    """Create the next sync Job (with its scoped credentials, if configured)."""
    s, run = p.services, p.run
    ours = sync_jobs.sandbox_jobs(s.cache, p.sandbox)
    running = next((job for job in ours if sync_jobs.job_finished(job) is None), None)
    if running is not None:
        # Its name left the status (a lost write, say): collect it before starting another,
        # so that no two Jobs ever write into the volume at once.
        name = running["metadata"]["name"]
        current.job = name
        current.job_sequence = max(current.job_sequence or 0, _sequence(p, name))
        run.status.user_library = current
        await _running(p, running, location)
        return
    # Past every Job of ours still there: a finished one of the next name is not this sync.
    names = [str(job["metadata"]["name"]) for job in ours]
    sequence = max([current.job_sequence or 0, *(_sequence(p, name) for name in names)]) + 1
    try:
        job = sync_jobs.desired_job(
            p.sandbox,
            s.settings,
            location,
            sequence=sequence,
            revision=attempt.revision,
            pod_uid=attempt.pod_uid,
            config=attempt.config,
            capacity=_capacity(p),
        )
        if _egress_unrestricted(p, job):
            return
        scoped = await sync_jobs.scoped_credentials(s.settings, location, job)
    except LibrarySyncError as exc:
        s.metrics.sync_failed(exc.reason)
        if exc.retryable:
            # STS throttled or briefly down: try again with backoff, not once per change.
            p.fail(USER_LIBRARY_SYNCED, exc.reason, exc.message)
            return
        current.last_error = exc.message
        current.failed_attempt = attempt.key
        run.status.user_library = current
        run.set(ConditionState.false(USER_LIBRARY_SYNCED, exc.reason, exc.message))
        p.event(f"Library{exc.reason}", exc.message, warning=True)
        return
    try:
        await sync_jobs.start_job(s.kube, s.cache, job, scoped)
    except ForeignObjectError as exc:
        # Someone else's object holds this Job's name (or its Secret's): the retry takes
        # the next number rather than the same name again.
        current.job_sequence = sequence
        run.status.user_library = current
        p.fail(USER_LIBRARY_SYNCED, exc.reason(exc.kind), str(exc))
        return
    name = job["metadata"]["name"]
    current.job = name
    current.job_sequence = sequence
    run.status.user_library = current
    _syncing(p, f"sync Job {name} started")
    p.event("LibrarySyncJobCreated", f"created sync Job {name}")


#: The value of the controller-uid labels of a Job's pods before the Job exists: no policy
#: can name it, but one may select pods that have the label at all.
UNKNOWN_UID = "not-yet-known"


def job_pod_labels(job: Mapping[str, Any]) -> dict[str, str]:
    """The labels the pods of ``job`` (not yet created) will carry: its template's, and
    those the API server adds to the template of a Job made without ``manualSelector``,
    which a NetworkPolicy may select them by (``batch.kubernetes.io/job-name Exists``)."""
    name = str(job["metadata"]["name"])
    return {
        **(job["spec"]["template"]["metadata"].get("labels") or {}),
        "batch.kubernetes.io/job-name": name,
        "job-name": name,
        "batch.kubernetes.io/controller-uid": UNKNOWN_UID,
        "controller-uid": UNKNOWN_UID,
    }


def _egress_unrestricted(p: Pass, job: dict[str, Any]) -> bool:
    """No sync Job while no NetworkPolicy restricts the egress of its pod: it holds S3
    credentials and reads a volume the agent writes. Said once (a Warning); the Job starts
    once such a policy appears (the NetworkPolicy watch wakes the sandbox)."""
    pod = {
        "metadata": {"namespace": job["metadata"].get("namespace"), "labels": job_pod_labels(job)}
    }
    refused = egress.refusal(
        p.services.cache,
        p.services.settings,
        pod,
        condition=USER_LIBRARY_SYNCED,
        pods="library sync Job pods",
        starts="the Job starts",
        manifest="manifests/sandbox-namespace's library-sync-networkpolicy.yaml",
    )
    if refused is None:
        return False
    held = p.run.condition(USER_LIBRARY_SYNCED)
    if held is None or held.reason != refused.reason:
        p.event(refused.reason, refused.message, warning=True)
    p.run.set(refused)
    return True


def _capacity(p: Pass) -> str | None:
    """The library volume's capacity, as this pass's volume step saw it."""
    volume = p.run.status.library_volume
    return volume.capacity if volume is not None else None


def _sequence(p: Pass, name: str) -> int:
    return sync_jobs.job_sequence(p.sandbox, name) or 0


def _syncing(p: Pass, message: str) -> None:
    # As in Exec mode: a library already synced stays True while the next Job runs, and a
    # failure stays False (its message says it is retried): one move per outcome.
    if not p.run.condition_is(USER_LIBRARY_SYNCED, ConditionStatus.TRUE, ConditionStatus.FALSE):
        p.run.set(ConditionState.unknown(USER_LIBRARY_SYNCED, "Syncing", message))


def _count(p: Pass, error: LibrarySyncError | None) -> None:
    """Count the outcome of a Job towards the sandbox's retry backoff (reset by a success
    or a failure retrying cannot fix)."""
    # The library pool keeps each sandbox's backoff for Exec mode's syncs (retry_in); Job
    # mode's are counted there too, so that both modes back off alike and the state goes
    # with the sandbox (forget) or the leadership (close).
    p.services.library_pool.count(p.run.key, Outcome("", error=error))


def _succeeded(
    p: Pass, current: UserLibraryStatus, outcome: sync_jobs.JobOutcome
) -> UserLibraryStatus:
    result = outcome.result
    synced = sync_jobs.synced_status(outcome, now=p.run.moment(), job_sequence=current.job_sequence)
    message = synced_message(synced)
    p.run.set(ConditionState.true(USER_LIBRARY_SYNCED, SYNCED, message))
    p.services.metrics.sync_finished(
        int(result.get("bytesTransferred") or 0), float(result.get("durationSeconds") or 0)
    )
    p.event("LibrarySynced", message)
    _count(p, None)
    return synced


def _failed(
    p: Pass, current: UserLibraryStatus, outcome: sync_jobs.JobOutcome
) -> UserLibraryStatus:
    reason = outcome.reason or "SyncJobFailed"
    p.services.metrics.sync_failed(reason)
    failed = current.model_copy()
    message = told(p, outcome.message, reason)
    failed.last_error = message[:1000]
    retryable, capacity = outcome.retryable, _capacity(p)
    if not retryable and grown_since(outcome.capacity, capacity):
        retryable = True  # a full volume, say: it has grown since the Job started
        message += f" (the library volume has grown to {capacity} since)"
    error = LibrarySyncError(message, retryable=retryable)
    _count(p, error)
    if retryable:
        failed.failed_attempt = None
        message += "; retried with backoff"  # sync() waits for it before the next Job
    else:
        failed.failed_attempt = Attempt.of(outcome.revision, outcome.pod_uid, outcome.config).key
    p.run.set(ConditionState.false(USER_LIBRARY_SYNCED, reason, message))
    p.event(f"Library{reason}", message, warning=True)
    return failed

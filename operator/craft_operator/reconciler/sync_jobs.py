"""Job mode of the user-library sync: one Job at a time per sandbox, its outcome in status.

A sync Job (``<name>-library-<n>``) runs ``craft-operator sync-user-library`` with S3
credentials from a Secret and writes into the sandbox's library PVC. The Job records which
revision, pod and configuration it syncs (annotations); its pod's termination message
carries the result. When the Job ends, the outcome goes into ``status.userLibrary`` and
the Job is deleted (with its pods). A change while a Job runs is picked up by the next Job.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from craft_operator.api.models import GROUP, CraftSandbox, UserLibraryStatus
from craft_operator.builders.library_job import (
    PERMANENT_EXIT_CODES,
    build_job_secret,
    build_sync_job,
    sync_job_name,
)
from craft_operator.config import Settings
from craft_operator.daemon_threads import in_daemon_thread
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import (
    JOBS,
    SECRETS,
    ApiError,
    ConflictError,
    KubeClient,
    NotFoundError,
)
from craft_operator.library import (
    LibraryConfigError,
    LibraryLocation,
    S3CredentialsSecret,
    caps_from_settings,
)
from craft_operator.library.scoped import (
    ScopedCredentialIssuer,
    ScopedCredentials,
    job_secret_ref,
    session_seconds,
)
from craft_operator.reconciler.children import ForeignObjectError, controlled_by, is_ours
from craft_operator.reconciler.steps import pod_state

JOB, POD = kinds.JOB.name, kinds.POD.name
ANNOTATION_POD_UID = f"{GROUP}/library-pod-uid"
ANNOTATION_CONFIG = f"{GROUP}/library-config"
#: The library volume's capacity when the Job started (a full volume grown since is
#: tried again).
ANNOTATION_CAPACITY = f"{GROUP}/library-volume-capacity"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: How often a running sync Job the watches do not see (its labels edited) is read again.
UNWATCHED_READ_SECONDS = 5.0


@dataclass(frozen=True)
class JobOutcome:
    """How a finished sync Job ended, read from the Job and its pod's termination message."""

    succeeded: bool
    revision: str
    pod_uid: str
    config: str
    result: Mapping[str, Any]
    retryable: bool
    message: str
    #: Why it failed, for the condition: the result's reason, else ``SyncTimedOut`` for a
    #: Job past its deadline, else ``SyncJobFailed`` (empty when it succeeded).
    reason: str = ""
    #: The library volume's capacity when the Job started, if known.
    capacity: str | None = None


def job_finished(job: Mapping[str, Any]) -> bool | None:
    """True if the Job succeeded, False if it failed, None while it runs."""
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return True
        if condition.get("type") == "Failed":
            return False
    return None


def job_pods(cache: ObjectCache, namespace: str, job_name: str, job_uid: str) -> list[Any]:
    """The Job's own pods in the watch cache, oldest first (anyone can label a pod with the
    Job's name: only a pod the Job controls counts)."""
    pods = []
    for pod in cache.in_namespace(POD, namespace):
        labels = pod.get("metadata", {}).get("labels") or {}
        if job_name not in (labels.get(JOB_NAME_LABEL), labels.get("job-name")):
            continue
        if controlled_by(pod, job_uid):
            pods.append(pod)
    return sorted(pods, key=lambda pod: str(pod["metadata"].get("creationTimestamp") or ""))


def waiting(cache: ObjectCache, job: Mapping[str, Any]) -> str | None:
    """Why the running Job's newest pod has not started, if it has not (its image not
    pulled, unschedulable, its Secret missing), in one line; ``None`` once it runs."""
    meta = job["metadata"]
    pods = job_pods(cache, meta.get("namespace", ""), meta["name"], str(meta.get("uid", "")))
    if not pods or pods[-1].get("status", {}).get("phase") not in (None, "Pending"):
        return None
    return pod_state.waiting_detail(pods[-1])


def _termination(
    cache: ObjectCache, namespace: str, job_name: str, job_uid: str
) -> tuple[dict[str, Any], int | None]:
    """The JSON result and exit code of the Job's last pod (from the watch cache).

    Only a pod the Job controls counts: anyone can label a pod with the Job's name.
    """
    found: tuple[dict[str, Any], int | None] = ({}, None)
    newest = ""
    for pod in job_pods(cache, namespace, job_name, job_uid):
        created = str(pod["metadata"].get("creationTimestamp") or "")
        for status in pod.get("status", {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated")
            if not terminated or created < newest:
                continue
            newest = created
            try:
                payload = json.loads(terminated.get("message") or "{}")
            except ValueError:
                payload = {}
            found = (payload if isinstance(payload, dict) else {}, terminated.get("exitCode"))
    return found


def _text(value: Any) -> str:
    """``value`` as text that can be written anywhere: a lone surrogate (escaped in the JSON
    of a termination message, a file name that is not UTF-8, say) as its escape."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def read_outcome(cache: ObjectCache, job: Mapping[str, Any]) -> JobOutcome | None:
    """The outcome of a finished Job; ``None`` while it runs."""
    finished = job_finished(job)
    if finished is None:
        return None
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    result, exit_code = _termination(
        cache, meta.get("namespace", ""), meta["name"], str(meta.get("uid", ""))
    )
    reason = ""
    if finished:
        message = "the sync Job succeeded"
    else:
        conditions = job.get("status", {}).get("conditions") or []
        failed: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Failed"), {})
        message = _text(result.get("error") or failed.get("message") or "the sync Job failed")
        reason = _text(result.get("reason") or "")
        if not reason:
            timed_out = failed.get("reason") == "DeadlineExceeded"
            reason = "SyncTimedOut" if timed_out else "SyncJobFailed"
    return JobOutcome(
        succeeded=finished,
        revision=str(annotations.get(f"{GROUP}/user-library-revision", "")),
        pod_uid=str(annotations.get(ANNOTATION_POD_UID, "")),
        config=str(annotations.get(ANNOTATION_CONFIG, "")),
        result=result,
        # A permanent exit is retried later when the sync says the refusal may be mended
        # without a change to the sandbox (S3's side: a bucket policy, a key).
        retryable=exit_code not in PERMANENT_EXIT_CODES or result.get("retryable") is True,
        message=message,
        reason=reason,
        capacity=annotations.get(ANNOTATION_CAPACITY),
    )


def desired_job(
    sandbox: CraftSandbox,
    settings: Settings,
    location: LibraryLocation,
    *,
    sequence: int,
    revision: str,
    pod_uid: str,
    config: str,
    capacity: str | None = None,
) -> dict[str, Any]:
    """The next sync Job, annotated with what it syncs (and the library volume's
    ``capacity`` now, if known)."""
    name = sync_job_name(sandbox, sequence)
    if settings.library_job_role_arn:
        credentials = job_secret_ref(name)
    elif settings.library_s3_secret:
        credentials = S3CredentialsSecret(name=settings.library_s3_secret)
    else:
        raise LibraryConfigError(
            "Job mode needs the operator setting CRAFT_LIBRARY_S3_SECRET: the Secret with the "
            "S3 credentials for sync Jobs (or CRAFT_LIBRARY_JOB_ROLE_ARN for scoped ones)"
        )
    job = build_sync_job(
        sandbox,
        image=settings.operator_image,
        location=location,
        credentials=credentials,
        sequence=sequence,
        caps=caps_from_settings(settings),
        revision=revision,
        active_deadline_seconds=job_deadline_seconds(settings),
    )
    annotations = job["metadata"].setdefault("annotations", {})
    annotations.update({ANNOTATION_POD_UID: pod_uid, ANNOTATION_CONFIG: config})
    if capacity:
        annotations[ANNOTATION_CAPACITY] = capacity
    return job


def job_deadline_seconds(settings: Settings) -> int:
    """A sync Job's ``activeDeadlineSeconds``: CRAFT_LIBRARY_SYNC_TIMEOUT rounded up, and
    never 0 (a Job with no time at all fails at once, every sync with it)."""
    return max(1, math.ceil(settings.library_sync_timeout))


@functools.lru_cache(maxsize=4)
def _issuer(role_arn: str, endpoint_url: str | None, region: str | None) -> ScopedCredentialIssuer:
    return ScopedCredentialIssuer(role_arn, endpoint_url=endpoint_url, region=region)


async def scoped_credentials(
    settings: Settings, location: LibraryLocation, job: Mapping[str, Any]
) -> ScopedCredentials | None:
    """Credentials reading only ``location`` for ``job`` (None: the shared Secret is used).

    Raises :class:`~craft_operator.library.errors.S3Error` subclasses when STS refuses.
    """
    if not settings.library_job_role_arn:
        return None
    issuer = _issuer(
        settings.library_job_role_arn,
        settings.library_sts_endpoint_url or settings.s3_endpoint_url,
        settings.s3_region,
    )
    meta = job["metadata"]
    return await in_daemon_thread(
        issuer.issue,
        location,
        namespace=meta["namespace"],
        job_name=meta["name"],
        seconds=session_seconds(job_deadline_seconds(settings)),
    )


async def start_job(
    kube: KubeClient,
    cache: ObjectCache,
    job: dict[str, Any],
    credentials: ScopedCredentials | None = None,
) -> dict[str, Any]:
    """Create the Job, and with ``credentials`` its own Secret, owned by it (the Job's pod
    waits for it).

    A Job of that name left from before a restart is taken over only if the sandbox
    controls it, and a Secret of the Secret's name only if that Job controls it; anything
    else by those names is someone else's: :class:`ForeignObjectError`, and our Job (if we
    made it) is removed again.
    """
    meta = job["metadata"]
    try:
        created = await kube.create(JOBS, job)
    except ConflictError:
        created = await kube.get(JOBS, meta["namespace"], meta["name"])
        if not is_ours(created, job):
            raise ForeignObjectError.of("Job", created) from None
    cache.put(JOB, created)
    if credentials is not None:
        try:
            await create_job_secret(kube, created, credentials)
        except (ApiError, ForeignObjectError):
            await remove_job(kube, cache, created)
            raise
    return created


async def create_job_secret(
    kube: KubeClient, job: Mapping[str, Any], credentials: ScopedCredentials
) -> None:
    """Create ``job``'s Secret of scoped credentials, owned by it; one it already has (made
    before a restart: it is named after the Job) is kept. Raises
    :class:`ForeignObjectError` if someone else's object holds the name."""
    meta = job["metadata"]
    secret = build_job_secret(job, credentials)
    try:
        await kube.create(SECRETS, secret)
    except ConflictError:
        existing = await kube.get(SECRETS, meta["namespace"], secret["metadata"]["name"])
        if not is_ours(existing, secret):
            raise ForeignObjectError.of("Secret", existing) from None


async def has_job_secret(kube: KubeClient, job: Mapping[str, Any]) -> bool:
    """Whether ``job``'s Secret of scoped credentials exists (read from the API server:
    the operator caches no such Secret)."""
    meta = job["metadata"]
    try:
        await kube.get(SECRETS, meta["namespace"], job_secret_ref(meta["name"]).name)
    except NotFoundError:
        return False
    return True


def watched(job: Mapping[str, Any]) -> bool:
    """Whether the watches see ``job``: it carries the managed-by label they select by."""
    return (job["metadata"].get("labels") or {}).get(kinds.LABEL_MANAGED_BY) == kinds.MANAGED_BY


async def read_back(
    kube: KubeClient, cache: ObjectCache, sandbox: CraftSandbox, name: str
) -> dict[str, Any] | None:
    """The sandbox's sync Job ``name`` as the API server has it, for when the watches
    cannot tell: it is not cached (gone, or its labels edited out of their selector: they
    were told it was deleted), or cached without the label they select by (they never see
    it change). ``None`` when it is gone or another's."""
    namespace = sandbox.metadata.namespace or ""
    try:
        job = await kube.get(JOBS, namespace, name)
    except NotFoundError:
        cache.forget(JOB, namespace, name)
        return None
    if not controlled_by(job, sandbox.metadata.uid):
        cache.forget(JOB, namespace, name)
        return None
    cache.put(JOB, job, read=True)
    return job


async def remove_job(kube: KubeClient, cache: ObjectCache, job: Mapping[str, Any]) -> None:
    """Delete a finished Job and its pods (the outcome is already in the status)."""
    meta = job["metadata"]
    try:
        await kube.delete(JOBS, meta.get("namespace"), meta["name"], uid=meta.get("uid"))
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise
    cache.forget(JOB, meta.get("namespace"), meta["name"])


def sandbox_jobs(cache: ObjectCache, sandbox: CraftSandbox) -> list[dict[str, Any]]:
    """The sandbox's sync Jobs (``<name>-library-<n>``) in the cache, finished or not:
    only those it controls (by uid; a name or a label proves nothing)."""
    namespace, uid = sandbox.metadata.namespace or "", sandbox.metadata.uid
    return [
        job
        for job in cache.in_namespace(JOB, namespace)
        if job_sequence(sandbox, job["metadata"]["name"]) is not None and controlled_by(job, uid)
    ]


def job_sequence(sandbox: CraftSandbox, name: str) -> int | None:
    """The n of the sync Job named ``<name>-library-<n>``; ``None`` for any other name."""
    number = name.removeprefix(sync_job_name(sandbox, 0).removesuffix("0"))
    if number == name or not number.isdigit() or not number.isascii():
        return None
    return int(number)


def job_name(sandbox: CraftSandbox, sequence: int) -> str:
    """The name of the n-th sync Job."""
    return sync_job_name(sandbox, sequence)


def synced_status(
    outcome: JobOutcome, *, now: datetime, job_sequence: int | None
) -> UserLibraryStatus:
    """``status.userLibrary`` after a successful sync Job: what its result reports.

    The result is the Job pod's termination message; a figure that is not a number is
    left out rather than failing the pass (or the status write) over it.
    """
    result = outcome.result
    return UserLibraryStatus(
        observed_revision=outcome.revision or None,
        last_sync_time=now,
        files=_count(result.get("files")),
        bytes=_count(result.get("bytes")),
        bytes_transferred=_count(result.get("bytesTransferred")),
        duration_seconds=_seconds(result.get("durationSeconds")),
        skipped=_count(result.get("skipped")),
        pod_uid=outcome.pod_uid,
        config_hash=outcome.config,
        job_sequence=job_sequence,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

"""Reading a CraftSandbox's status as the backend needs it: ready, failed, or how far along.

Pure functions over the object as the API returns it. A status the operator wrote for an
older spec (``status.observedGeneration`` behind ``metadata.generation``) is neither ready
nor failed: the operator has not looked at the new spec yet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from craft_operator.api.base import quantity_value
from craft_operator.api.models import (
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_LIBRARY_REVISION,
    ConditionStatus,
    CraftSandboxStatus,
    Phase,
)
from craft_operator.api.status_codec import parse_status
from craft_operator.client.errors import ConditionReport, SandboxFailedError
from craft_operator.client.objects import parse_activity

READY = "Ready"
#: UserLibrarySynced's reason (condition True) when no bucket is configured.
NOT_CONFIGURED = "NotConfigured"
#: UserLibrarySynced's reason when the library directory could not be written (a full volume).
DESTINATION_FAILED = "DestinationFailed"
#: The conditions Ready requires, in the operator's order (``craft_operator.reconciler.table``; a
#: test keeps the two equal, as this room may not import that one).
REQUIRED = ("CredentialsReady", "SkillRendered", "PodReady", "CLIValidated", "UserLibrarySynced")

#: False reasons after which the sandbox cannot become Ready until someone changes
#: something (the spec, the platform's policy, a clashing object, the image): the operator
#: either stops retrying or keeps failing the same way. Most also set phase Failed.
NEEDS_A_CHANGE: Mapping[str, frozenset[str]] = {
    # TenantGone: the tenant's schema does not exist (multi-tenant Onyx); retried, but only
    # a new spec.user.tenantId, or a schema someone creates, ends it.
    "CredentialsReady": frozenset({"PolicyDenied", "SecretNameTaken", "TenantGone"}),
    "SkillRendered": frozenset({"ConfigMapNameTaken"}),
    "PodReady": frozenset(
        {
            "PolicyDenied",
            "InvalidSpec",
            "InvalidResources",
            "NoServerURL",
            "PodRejected",
            "PodFailedRepeatedly",
            "PodNameTaken",
            "WorkspaceNameTaken",
            "ProvisioningTimedOut",
            "EgressNotRestricted",
        }
    ),
    "CLIValidated": frozenset({"CLIMissing", "NotConfigured"}),
    "UserLibrarySynced": frozenset({"VolumeNameTaken", "JobNameTaken"}),
}


@dataclass(frozen=True)
class ConditionView:
    """One condition: its type, ``True``/``False``/``Unknown``, reason and message."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Progress:
    """Where a sandbox is on its way to Ready, for progress reports (as KubeSpawner's).

    ``percent`` counts the conditions Ready requires that hold; ``message`` is one line for
    people; ``current`` is False while the status still describes an older spec.
    """

    namespace: str
    name: str
    phase: str | None
    ready: bool
    percent: int
    message: str
    conditions: tuple[ConditionView, ...]
    current: bool
    status: CraftSandboxStatus = field(repr=False, compare=False)
    #: The operator's key for a library sync now (the annotated revision, the pod, the
    #: configuration of the last successful sync); ``None`` if the status cannot tell.
    library_attempt: str | None = field(default=None, repr=False, compare=False)
    #: The last user activity recorded (the last-activity annotation), if readable.
    last_activity: datetime | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"[{self.percent:3d}%] {self.namespace}/{self.name} {self.message}"

    @property
    def key(self) -> tuple[object, ...]:
        """What a progress report is about: a new report only when this changes."""
        return (self.phase, self.ready, self.current, self.conditions)


def progress_of(obj: Mapping[str, Any]) -> Progress:
    """The progress the object's status shows."""
    meta = obj.get("metadata") or {}
    status, _ = parse_status(obj.get("status"))
    current = _current(meta, status)
    views = tuple(
        ConditionView(c.type, c.status.value, c.reason, c.message) for c in status.conditions
    )
    by_type = {view.type: view for view in views}
    done = sum(1 for t in REQUIRED if getattr(by_type.get(t), "status", "") == "True")
    ready = current and getattr(by_type.get(READY), "status", "") == "True"
    phase = status.phase.value if status.phase else None
    return Progress(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        phase=phase,
        ready=ready,
        percent=100 if ready else done * 100 // (len(REQUIRED) + 1),
        message=_message(phase, ready, current, views),
        conditions=views,
        current=current,
        status=status,
        library_attempt=_library_attempt(meta, status),
        last_activity=parse_activity((meta.get("annotations") or {}).get(ANNOTATION_LAST_ACTIVITY)),
    )


def failure_of(progress: Progress) -> SandboxFailedError | None:
    """Why the sandbox cannot become Ready as it is, or ``None`` if it may still.

    A library sync that failed for good counts only if it is the current attempt's: the
    operator keeps an earlier attempt's failure while it runs the next one (after a new
    revision, a new pod, a new configuration), and one on a full library volume while the
    volume is being grown. A sandbox asleep after being idle, with no activity since, or
    suspended, needs waking first.
    """
    if not progress.current or progress.ready:
        return None
    status = progress.status
    failed = _first_failure(progress, status)
    if failed is None and status.phase == Phase.FAILED:
        ready = next((c for c in progress.conditions if c.type == READY), None)
        failed = ConditionReport(
            READY, ready.reason if ready else "Failed", ready.message if ready else ""
        )
    if failed is None and status.phase == Phase.SUSPENDED:
        failed = ConditionReport(
            "PodReady", "Suspended", "spec.suspend is true: wake the sandbox first"
        )
    if failed is None and status.phase == Phase.SLEEPING and _stays_asleep(progress):
        failed = ConditionReport(
            "PodReady",
            "Sleeping",
            "asleep after being idle, with no activity since (status.sleepingSince): "
            "touch() or wake() the sandbox first",
        )
    if failed is None:
        return None
    return SandboxFailedError(progress.namespace, progress.name, progress.phase, failed)


def _first_failure(progress: Progress, status: CraftSandboxStatus) -> ConditionReport | None:
    """The first condition, in the operator's order, that says it needs a change; on a
    Failed sandbox with none, the first False one (a transient one earlier in the order,
    the database down or a revocation retried, is not why it failed)."""
    false = [
        c
        for type_ in REQUIRED
        for c in progress.conditions
        if c.type == type_ and c.status == ConditionStatus.FALSE.value
    ]
    for condition in false:
        final = (
            condition.reason in NEEDS_A_CHANGE.get(condition.type, frozenset())
            # A freshly minted PAT was refused too: no more are minted until the spec changes.
            or (condition.reason == "AuthFailed" and (status.cli_auth_failures or 0) > 1)
            # A library sync failed in a way retrying cannot fix (over a cap, no bucket, ...).
            or (
                condition.type == "UserLibrarySynced"
                and _library_gave_up(progress, status, condition.reason)
            )
        )
        if final:
            return ConditionReport(condition.type, condition.reason, condition.message)
    if status.phase == Phase.FAILED and false:
        first = false[0]
        return ConditionReport(first.type, first.reason, first.message)
    return None


def pod_stopped(progress: Progress) -> bool:
    """Whether the operator has stopped the pod of a suspended sandbox: a status for the
    current spec that names no pod. Its phase does not matter: ``Suspended`` once it
    stopped the pod, but a sandbox the platform's policy denies stays ``Failed`` (the
    operator deleted its pod with its other children, and runs no step that would say
    ``Suspended``)."""
    return progress.current and not progress.status.pod_uid


def stop_refused(progress: Progress) -> SandboxFailedError | None:
    """Why the operator will not stop the pod of a suspended sandbox, or ``None``: a spec
    it cannot read (``PodReady`` ``InvalidSpec``) is acted on in no way, suspend included,
    so its pod runs on until someone fixes the spec."""
    if not progress.current or not progress.status.pod_uid:
        return None
    pod_ready = next((c for c in progress.conditions if c.type == "PodReady"), None)
    if pod_ready is None or (pod_ready.status, pod_ready.reason) != ("False", "InvalidSpec"):
        return None
    report = ConditionReport(pod_ready.type, pod_ready.reason, pod_ready.message)
    return SandboxFailedError(
        progress.namespace, progress.name, progress.phase, report, goal="stop its pod"
    )


def library_failure_key(obj: Mapping[str, Any]) -> str | None:
    """The operator's record of the last library sync that retrying cannot fix, if any."""
    library = (obj.get("status") or {}).get("userLibrary") or {}
    return library.get("failedAttempt") or None


def library_synced(obj: Mapping[str, Any], revision: str, failed_before: str | None) -> bool | None:
    """True once ``revision`` is synced; raises if its sync failed for good; else None.

    ``obj`` is read after ``revision`` was annotated. Once a later write replaced it, a sync
    of the revision annotated now counts too: the operator syncs the whole library as the
    annotation stands when the sync starts, so that sync started after ``revision`` was
    written. A failure is this revision's only if it is recorded for the sync the
    annotation asks for now (its key names the revision, the pod and the configuration):
    a sync of an earlier revision still running when ``revision`` was annotated may fail
    after, and the operator then syncs ``revision``. Before any successful sync there is
    no configuration to key it by: then any failure recorded since ``failed_before``
    counts. With no bucket configured there is nothing to sync it from: raises.
    """
    progress = progress_of(obj)
    library = progress.status.user_library
    if library is not None and library.observed_revision in _covering(obj, revision):
        return True
    failed = library_failure_key(obj)
    current = progress.library_attempt
    condition = next((c for c in progress.conditions if c.type == "UserLibrarySynced"), None)
    if condition is not None and _retried_once_grown(progress.status, condition.reason):
        failed = None  # the operator syncs again once the volume has grown
    if failed and (failed == current if current is not None else failed != failed_before):
        report = ConditionReport(
            "UserLibrarySynced",
            condition.reason if condition else "SyncFailed",
            condition.message if condition else str((library and library.last_error) or ""),
        )
        raise SandboxFailedError(
            progress.namespace, progress.name, progress.phase, report, goal="sync its library"
        )
    unconfigured = _library_not_configured(progress)
    if unconfigured is not None:
        raise SandboxFailedError(
            progress.namespace,
            progress.name,
            progress.phase,
            unconfigured,
            goal="sync its library",
        )
    return None


def _covering(obj: Mapping[str, Any], revision: str) -> set[str]:
    """The observed revisions whose sync includes the files ``revision`` announced."""
    annotated = ((obj.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_LIBRARY_REVISION
    )
    return {revision, annotated} if annotated else {revision}


def _library_not_configured(progress: Progress) -> ConditionReport | None:
    """UserLibrarySynced True ``NotConfigured`` for the current spec: no bucket, so the
    operator syncs nothing (and records no revision) until one is configured."""
    if not progress.current:
        return None
    synced = next((c for c in progress.conditions if c.type == "UserLibrarySynced"), None)
    if synced is None or (synced.status, synced.reason) != ("True", NOT_CONFIGURED):
        return None
    return ConditionReport(synced.type, synced.reason, synced.message, synced.status)


def _library_gave_up(progress: Progress, status: CraftSandboxStatus, reason: str) -> bool:
    failed = status.user_library.failed_attempt if status.user_library is not None else None
    if not failed or _retried_once_grown(status, reason):
        return False
    if progress.library_attempt is None:
        # Never synced: no configuration to key the current attempt by. A failure retrying
        # cannot fix fails the wait at once, rather than leaving it to its timeout (it may
        # be one the operator retries after a new revision: the caller may wait again).
        return True
    # Another key is an earlier attempt's, even one recorded during the wait (the sync of
    # the revision annotated before ended after this one was): the operator retries.
    return failed == progress.library_attempt


def _retried_once_grown(status: CraftSandboxStatus, reason: str) -> bool:
    """A sync that failed on a full library volume while the volume is asked to grow: the
    operator keeps the failure (its key has no size) until the bound volume's capacity
    grows, then tries the sync again, so it is not final while the resize is pending
    (``status.libraryVolume.requested`` above its ``capacity``)."""
    volume = status.library_volume
    if reason != DESTINATION_FAILED or volume is None:
        return False
    requested, capacity = _quantity(volume.requested), _quantity(volume.capacity)
    return requested is not None and capacity is not None and requested > capacity


def _quantity(text: str | None) -> Decimal | None:
    """A size's value; ``None`` if there is none or it is not a quantity."""
    try:
        return quantity_value(text) if text is not None else None
    except ValueError:
        return None


def _stays_asleep(progress: Progress) -> bool:
    """Phase Sleeping with no activity that wakes it: the operator wakes an idle sandbox
    for an activity at or after the moment it fell asleep (both to the second: a touch in
    that same second wakes it)."""
    since = progress.status.sleeping_since
    if since is None:
        return False
    return progress.last_activity is None or progress.last_activity < since


def _library_attempt(meta: Mapping[str, Any], status: CraftSandboxStatus) -> str | None:
    """``craft_operator.reconciler.steps.library_attempt.Attempt.of(...).key`` for a sync
    now, if the configuration is still that of the last successful sync (a test keeps the
    two equal)."""
    library = status.user_library
    if library is None or not library.config_hash or not status.pod_uid:
        return None
    revision = (meta.get("annotations") or {}).get(ANNOTATION_LIBRARY_REVISION) or ""
    text = f"{revision}|{status.pod_uid}|{library.config_hash}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _current(meta: Mapping[str, Any], status: CraftSandboxStatus) -> bool:
    generation = meta.get("generation")
    if generation is None:
        return status.phase is not None
    return status.observed_generation is not None and status.observed_generation >= generation


def _message(
    phase: str | None, ready: bool, current: bool, views: tuple[ConditionView, ...]
) -> str:
    if ready:
        return "Ready: the sandbox is ready for its agent"
    if not current:
        return f"{phase or 'Pending'}: waiting for the operator to see the latest spec"
    by_type = {view.type: view for view in views}
    for type_ in REQUIRED:
        view = by_type.get(type_)
        if view is None:
            return f"{phase or 'Pending'}: {type_} not known yet"
        if view.status != "True":
            detail = f": {view.message}" if view.message else ""
            return f"{phase or 'Pending'}: {type_} {view.status} {view.reason}{detail}"
    return f"{phase or 'Pending'}: all conditions hold, Ready not yet reported"

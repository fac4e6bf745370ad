"""Creating, replacing and giving up on the sandbox's pod, with backoff after failures."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from craft_operator.api.constants import LABEL_SANDBOX
from craft_operator.api.models import Phase
from craft_operator.builders.naming import pod_name
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler.children import ForeignObjectError, controlled_by, is_ours
from craft_operator.reconciler.step import Pass, Stop
from craft_operator.reconciler.steps import claim, pod_state
from craft_operator.status import POD_READY, ConditionState

WAITING = "WaitingForPod"
#: PodReady's reason when the API server refuses the pod for what it is (400, 422, a
#: LimitRange's bounds): retrying the same spec at once cannot help.
REJECTED = "PodRejected"
#: How long the same spec waits before it is tried again after such a refusal: an admission
#: webhook or a LimitRange may have changed meanwhile, which no event of the sandbox says.
RETRY_REJECTED_AFTER = timedelta(minutes=10)
POD = kinds.POD


def restart_wait(p: Pass) -> Stop | None:
    """A stop while the backoff after a failed pod lasts (no new pod, created or claimed:
    a sandbox whose pods keep failing must not drain a pool either), or, for a pod the API
    server refused, until :data:`RETRY_REJECTED_AFTER` has passed."""
    s, run = p.services, p.run
    previous = run.condition(POD_READY)
    refused_at = p.memory.rejected.get(run.key)
    if (
        refused_at is not None
        and previous is not None
        and previous.reason == REJECTED
        and run.failed_pod_stands()
    ):
        # At most the whole wait: a clock stepped back must not stretch it.
        retry_after = RETRY_REJECTED_AFTER.total_seconds()
        wait = min((refused_at - run.now).total_seconds() + retry_after, retry_after)
        if wait > 0:
            run.revisit(after=wait)
            return Stop(WAITING)
    failures = run.status.pod_failures or 0
    failed_at = _last_failure(p) if failures else None
    if failed_at is not None:
        backoff = pod_state.restart_backoff(s.settings.pod_restart_backoff, failures)
        # At most the whole backoff: the failure's time may be another replica's clock.
        wait = min((failed_at - run.now).total_seconds() + backoff, backoff)
        if wait > 0:
            run.revisit(after=wait)
            return Stop(WAITING)
    return None


def _last_failure(p: Pass) -> datetime | None:
    """When the sandbox's last pod failed, if a backoff may still run from it: the time the
    status recorded, whatever PodReady has said since (PodTerminating while a finalizer
    held the failed pod); for a status without it, when PodReady turned PodFailed."""
    run = p.run
    if run.status.last_pod_failure_time is not None:
        # Not the condition's lastTransitionTime: a pod that fails before it was ever Ready
        # leaves PodReady False all along, so that time is when the pod was created.
        return run.status.last_pod_failure_time
    previous = run.condition(POD_READY)
    if previous is not None and previous.reason == "PodFailed":
        return previous.last_transition_time or run.now
    return None


#: How the API server's LimitRanger says a pod's resources are out of a LimitRange's
#: bounds ("maximum cpu usage per Container is 4, but limit is 8"), which it answers 403.
_LIMIT_RANGE = re.compile(
    r"(maximum|minimum) \S+ usage per (Container|Pod) is|limit to request ratio per"
)


def refused_by_limit_range(exc: ApiError) -> bool:
    """Whether the API server refused a pod for resources out of a LimitRange's bounds."""
    return exc.status == 403 and _LIMIT_RANGE.search(str(exc)) is not None


async def create(p: Pass, desired: dict[str, Any]) -> Stop:
    """Create the pod (the caller waited out :func:`restart_wait`); the pass waits for it
    to start."""
    s, run = p.services, p.run
    started = time.monotonic()
    try:
        created = await s.kube.create(POD.api, desired)
    except ConflictError:
        return await _exists_already(p, desired)
    except ApiError as exc:
        if exc.status in (400, 422) or refused_by_limit_range(exc):
            # The API server refuses this pod (e.g. an admission policy, or resources over
            # a LimitRange's bounds); retrying the same spec cannot help, so wait for the
            # spec or the settings to change. (A quota's 403 passes: retried.)
            p.memory.rejected[run.key] = run.now
            p.fail_spec(REJECTED, str(exc))
        else:
            p.fail(POD_READY, "PodCreateFailed", str(exc))
        return Stop(WAITING)
    s.metrics.observe_phase(ProvisioningPhase.POD_CREATE, time.monotonic() - started)
    claim.count_cold_start(p)
    s.cache.put(POD.name, created)
    run.status.claimed_from = None
    run.pod_exists = True
    run.status.pod_uid = created["metadata"].get("uid")
    p.memory.made[run.key] = (str(run.status.pod_uid), run.now)
    _record_admission(p, desired, created)
    run.set(ConditionState.false(POD_READY, "PodStarting", pod_state.waiting_detail(created)))
    # The pod's own watch event is the echo of this write: without a change to it (no
    # scheduler, say) nothing else brings a pass before the resync.
    run.revisit(after=s.settings.provisioning_timeout + 1)
    p.event("PodCreated", f"created pod {pod_name(p.sandbox)}")
    return Stop(WAITING)


def _record_admission(p: Pass, desired: Mapping[str, Any], created: Mapping[str, Any]) -> None:
    """Keep in the status the images the API server admitted, if a mutating webhook changed
    them (a digest pinned, a registry mirror, a sidecar), and warn that it did; else the
    pod's first update would be taken for an edit of its image and the pod replaced, again
    and again. No write of its own: the pass writes the status, and until one does (it may
    be lost) this process remembers them."""
    admitted, built = pod_state.images_of(created), pod_state.images_of(desired)
    if admitted == built:
        p.run.status.admitted_images = None
        return
    kept = pod_state.admitted_images(created)
    p.run.status.admitted_images = kept
    p.memory.admitted[p.run.key] = (str(created["metadata"].get("uid")), kept)
    p.event(
        "PodMutatedAtAdmission",
        f"the API server admitted pod {created['metadata']['name']} with images {admitted} "
        f"instead of {built} (a mutating webhook); the pod is kept as admitted",
        warning=True,
    )


async def _exists_already(p: Pass, desired: Mapping[str, Any]) -> Stop:
    """The create raced an existing pod: ours (the cache is behind) or someone else's."""
    s = p.services
    namespace, name = p.sandbox.metadata.namespace, pod_name(p.sandbox)
    existing = await s.kube.get(POD.api, namespace, name)
    if not is_ours(existing, desired):
        if existing["metadata"].get("deletionTimestamp"):
            # Not cached: the watches may never see it go (it may lack our labels).
            return name_held(p, existing)
        p.fail(POD_READY, "PodNameTaken", str(ForeignObjectError("Pod", namespace, name)))
        return Stop(WAITING)
    s.cache.put(POD.name, existing, read=True)
    p.run.revisit(after=0)
    p.run.pod_exists = True
    return Stop(WAITING)


async def remove(p: Pass, pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Delete this very pod (its uid), not a successor that took its name meanwhile; the
    API server's answer (``None``: it was gone already, or another pod has its name now)
    goes into the cache at once, so a pass before the pod's watch event sees it being
    deleted (or gone), not still running: a failed pod is not counted twice, a stopped
    one not stopped again."""
    meta = pod["metadata"]
    try:
        answer = await p.services.kube.delete(
            POD.api, meta.get("namespace"), meta["name"], uid=meta.get("uid")
        )
    except ConflictError:
        answer = None  # the uid precondition failed: that pod is gone, another has its name
    if (
        answer is not None
        and answer.get("kind") == "Pod"
        and answer["metadata"].get("deletionTimestamp")
    ):
        p.services.cache.put(POD.name, answer)
    else:
        p.services.cache.remove(POD.name, pod)
    return answer


def own_pods(p: Pass) -> Iterator[dict[str, Any]]:
    """The cached pods the sandbox controls (made for it or claimed), whatever their name."""
    meta = p.sandbox.metadata
    for pod in p.services.cache.labelled(POD.name, meta.namespace, LABEL_SANDBOX, meta.name):
        if controlled_by(pod, meta.uid):
            yield pod


def extra_pods(p: Pass, kept: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The live pods the sandbox controls besides ``kept`` (all of them if ``None``), as
    cached: one sandbox has one pod, and none while it is suspended or asleep."""
    kept_uid = None if kept is None else kept["metadata"].get("uid")
    return [
        pod
        for pod in own_pods(p)
        if not pod["metadata"].get("deletionTimestamp")
        and (kept is None or pod["metadata"].get("uid") != kept_uid)
    ]


async def remove_extra(p: Pass, extra: Mapping[str, Any], *, why: str) -> dict[str, Any] | None:
    """Delete one of :func:`extra_pods`, said in an ``ExtraPodDeleted`` warning that ends
    with ``why``; the API server's answer, as :func:`remove`'s."""
    answer = await remove(p, extra)
    if answer is not None:  # else gone already, or another pod took its name meanwhile
        message = f"deleted pod {extra['metadata']['name']}: {why}"
        p.event("ExtraPodDeleted", message, warning=True)
    return answer


def look_again_once_overdue(p: Pass, answer: Mapping[str, Any] | None) -> None:
    """A pod whose deletion was asked for and that is being deleted: the next pass comes
    once it would be overdue, if nothing (its deletion's watch event) brings one sooner; a
    pod held there (a finalizer, an unreachable node) sends no event."""
    if answer is not None and answer.get("kind") == "Pod":
        seconds = pod_state.overdue_in(answer, p.run.now)
        if seconds is not None:
            p.run.revisit(after=max(seconds, 0) + 1)


async def replace(
    p: Pass, pod: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
) -> Stop:
    """Delete the pod so the next pass creates it anew, and say why."""
    look_again_once_overdue(p, await remove(p, pod))
    p.run.pod_exists = True
    p.run.set(ConditionState.false(POD_READY, reason, message))
    p.event(reason, message, warning=warning)
    return Stop(WAITING)


async def ended(p: Pass, pod: dict[str, Any]) -> Stop:
    """The pod failed or exited: replace it with backoff, or give up after too many."""
    s, run = p.services, p.run
    detail = pod_state.failure_detail(pod)
    failures = run.status.pod_failures or 0
    limit = s.settings.max_pod_failures
    if failures >= limit:
        run.phase = Phase.FAILED
        run.set(ConditionState.false(POD_READY, "PodFailedRepeatedly", detail))
        return Stop(WAITING)
    failures += 1
    run.status.pod_failures = failures
    run.status.last_pod_failure_time = run.now
    if failures >= limit:
        message = (
            f"{detail}; {failures} pods failed in a row, not replacing it until the spec "
            "changes (the failed pod is kept for its logs)"
        )
        run.phase = Phase.FAILED
        run.set(ConditionState.false(POD_READY, "PodFailedRepeatedly", message))
        p.event("PodFailedRepeatedly", message, warning=True)
        return Stop(WAITING)
    await replace(p, pod, reason="PodFailed", message=detail, warning=True)
    run.revisit(after=pod_state.restart_backoff(s.settings.pod_restart_backoff, failures))
    return Stop(WAITING)


def name_held(p: Pass, pod: Mapping[str, Any]) -> Stop:
    """A pod of the sandbox's name that is not its own is being deleted (an earlier
    sandbox's of this name, recreated at once): the sandbox waits for the name as for its
    own old pod, and takes nothing of that pod's."""
    whose = "another object's"
    stopping = f"{whose} pod {pod['metadata']['name']} is stopping: the sandbox's follows"
    return wait_for_pod_to_go(p, pod, whose=whose, stopping=stopping)


def wait_for_pod_to_go(p: Pass, pod: Mapping[str, Any], *, whose: str, stopping: str) -> Stop:
    """Wait for a pod being deleted to go (its watch event, if it has one, brings the next
    pass): ``stopping`` says so; looked at every few seconds, or every minute once it is
    overdue, said to be held then (a finalizer, an unreachable node), of ``whose``."""
    run = p.run
    stuck = pod_state.stuck_terminating(pod, run.now)
    if stuck is not None:
        run.set(ConditionState.false(POD_READY, "PodTerminating", f"{whose} {stuck}"))
        run.revisit(after=pod_state.TERMINATING_OVERDUE.total_seconds())
        return Stop(WAITING)
    run.set(ConditionState.false(POD_READY, "PodTerminating", stopping))
    run.revisit(after=5)
    return Stop(WAITING)

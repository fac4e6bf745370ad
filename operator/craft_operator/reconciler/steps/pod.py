"""PodReady: the sandbox's pod exists, matches its spec, and is Ready."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from craft_operator.api.models import ConditionStatus, LibraryMode
from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL_TEMPLATE_HASH
from craft_operator.builders.library_job import library_claim_name
from craft_operator.builders.naming import child_labels, pod_name
from craft_operator.builders.pod import SandboxConfigError, build_pod
from craft_operator.builders.pool import claimed_template_hashes, sandbox_template_hash
from craft_operator.kube.client import ConflictError, NotFoundError
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler import egress
from craft_operator.reconciler.children import ForeignObjectError, as_seen, controlled_by, is_ours
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import claim, pod_lifecycle, pod_state, sleep
from craft_operator.status import POD_READY, ConditionState

WAITING = pod_lifecycle.WAITING
#: Seconds a pod must stay Ready before the failures before it are forgotten (as the
#: kubelet's crash-loop backoff): a pod that fails soon after it is Ready, claimed pool
#: pods included, counts towards PodFailedRepeatedly and waits out a growing backoff.
STABLE_AFTER = 600.0
POD = pod_lifecycle.POD


async def converge_pod(p: Pass) -> Stop | None:
    """Create, keep or replace the pod; the pass goes on once it runs and is Ready."""
    s, run, sandbox = p.services, p.run, p.sandbox
    volume = (
        library_claim_name(sandbox) if sandbox.spec.user_library.mode == LibraryMode.JOB else None
    )
    try:
        desired = build_pod(sandbox, s.settings, library_claim=volume)
    except SandboxConfigError as exc:
        # Suspending and idle sleep still stop the pod an earlier spec made.
        held = await sleep.hold(p, own_pod(p))
        if held is not None:
            return held
        p.fail_spec(exc.reason, str(exc))
        return Stop(WAITING)
    namespace, name = sandbox.metadata.namespace, pod_name(sandbox)
    named = s.cache.get(POD.name, namespace, name)
    foreign = named if named is not None and not is_ours(named, desired) else None
    # A pod of the sandbox's name that is not its own does not hide the pod it claimed, nor,
    # while it is being deleted (an earlier sandbox's of this name, say), a claim.
    taken = claimed_pod(p) if named is None or foreign is not None else None
    leaving = foreign is not None and bool(foreign["metadata"].get("deletionTimestamp"))
    actual = taken or (None if leaving else named)
    if actual is None:
        found = await _claimed_out_of_sight(p)
        if isinstance(found, Stop):
            return found
        actual = found
    run.status.pod_name = actual["metadata"]["name"] if actual is not None else name
    # Only the sandbox's own pod is stopped: a pod of its name may be another's (a pool
    # pod's or a claimed pod's name is anyone's to give a sandbox).
    held = await sleep.hold(p, actual if actual is not None and is_ours(actual, desired) else None)
    if held is not None:
        return held
    if actual is not None and not is_ours(actual, desired):
        return p.fail(POD_READY, "PodNameTaken", str(ForeignObjectError("Pod", namespace, name)))
    if actual is not None and actual["metadata"].get("deletionTimestamp"):
        return _terminating(p, actual)
    if actual is not None:
        await _remove_extra_pods(p, actual)
    else:
        refused = egress.refusal(s.cache, s.settings, desired)
        if refused is not None:
            return _egress_refused(p, refused)
        waiting = pod_lifecycle.restart_wait(p)
        if waiting is not None:
            return waiting
        claimed = await claim.claim(p)
        if isinstance(claimed, Stop):
            return claimed
        if claimed is None:
            if foreign is not None:
                return pod_lifecycle.name_held(p, foreign)
            return await pod_lifecycle.create(p, desired)
        run.status.pod_name = claimed["metadata"]["name"]
        actual = claimed
    return await _running(p, actual, desired)


async def _remove_extra_pods(p: Pass, kept: dict[str, Any]) -> None:
    """Delete any other live pod this sandbox controls besides ``kept``, its own live pod:
    one sandbox, one pod. None is made on purpose; a claim whose answer was lost while the
    cache lagged could leave one."""
    why = f"the sandbox's pod is {kept['metadata']['name']}"
    for extra in pod_lifecycle.extra_pods(p, kept):
        await pod_lifecycle.remove_extra(p, extra, why=why)


def has_pod(p: Pass) -> bool:
    """Whether a pod the sandbox controls exists (made for it or claimed), as cached."""
    return any(True for _ in pod_lifecycle.own_pods(p))


def own_pod(p: Pass) -> dict[str, Any] | None:
    """The sandbox's pod, as cached: the pod of its name if the sandbox controls it, else
    the pool pod it claimed."""
    meta = p.sandbox.metadata
    named = p.services.cache.get(POD.name, meta.namespace, pod_name(p.sandbox))
    if named is not None and controlled_by(named, meta.uid):
        return named
    return claimed_pod(p)


async def _claimed_out_of_sight(p: Pass) -> dict[str, Any] | Stop | None:
    """The pool pod the sandbox claimed, missing from the cache although it may run on:
    its labels edited out of the watches' selector (they were told it was deleted). Read
    by the name the status recorded and relabelled, so that no second pod is claimed or
    made beside it; ``None`` when it is gone (or no claimed pod was recorded), a
    :class:`Stop` to look again when it changed before its labels went back."""
    recorded, pool = p.run.status.pod_name, p.run.status.claimed_from
    if pool is None or not recorded or recorded == pod_name(p.sandbox):
        return None
    s, namespace = p.services, p.sandbox.metadata.namespace
    try:
        found = await s.kube.get(POD.api, namespace, recorded)
    except NotFoundError:
        return None
    if not controlled_by(found, p.sandbox.metadata.uid):
        return None
    # Its template hash is not recorded elsewhere: without it, the pod is replaced.
    labels = {**child_labels(p.sandbox), LABEL_CLAIMED_FROM: pool}
    have = found["metadata"].get("labels") or {}
    if any(have.get(key) != value for key, value in labels.items()):
        relabelled = await _put_labels_back(p, found, labels)
        return Stop(WAITING) if relabelled is None else relabelled
    s.cache.put(POD.name, found, read=True)
    return found


def _terminating(p: Pass, pod: dict[str, Any]) -> Stop:
    """The old pod is being deleted: wait for it to go (its watch event brings the next
    pass), looking again every few seconds, or every minute once it is overdue: a pod held
    by a finalizer or on an unreachable node may stay for hours, and is said so."""
    p.run.pod_exists = True
    return pod_lifecycle.wait_for_pod_to_go(
        p, pod, whose="the old", stopping="the old pod is stopping"
    )


def claimed_pod(p: Pass) -> dict[str, Any] | None:
    """The pool pod this sandbox claimed (named after its pool, not the sandbox), if any."""
    for pod in pod_lifecycle.own_pods(p):
        if LABEL_CLAIMED_FROM in (pod["metadata"].get("labels") or {}):
            return pod
    return None


async def _running(p: Pass, actual: dict[str, Any], desired: dict[str, Any]) -> Stop | None:
    """The pod exists: replace it if it drifted or ended, else wait until it is Ready."""
    run = p.run
    run.pod_exists = True
    if LABEL_CLAIMED_FROM in (actual["metadata"].get("labels") or {}):
        p.memory.cold_start.pop(run.key, None)  # the next start without a pod is said anew
        claim.count_landed(p, actual)  # (a claim whose answer was lost: counted here)
    else:
        claim.count_cold_start(p)  # (a create whose answer was lost: counted here)
    uid = actual["metadata"].get("uid")
    remembered = p.memory.admitted.get(run.key)
    mine = remembered[1] if remembered and remembered[0] == uid else None
    if run.status.pod_uid != uid:
        # Another pod's (a claimed one has none), unless this pod's create was never written.
        run.status.admitted_images = mine
    # Written, but dropped by an older CRD if the status lacks them: judged by what this
    # process saw admitted, not written again on every pass.
    admitted = run.status.admitted_images or mine
    run.status.pod_uid = uid
    # The pod kept says where it came from: a claimed pod deleted as an extra beside a cold
    # one (a claim whose pass did not see the cold pod's create) leaves no pool behind.
    run.status.claimed_from = (actual["metadata"].get("labels") or {}).get(LABEL_CLAIMED_FROM)
    stale = _volume_needed(p, actual) or pod_state.drift(
        actual,
        desired,
        claimed_as=_claimed_template(p, actual),
        admitted=admitted,
    )
    if stale:
        return await pod_lifecycle.replace(p, actual, reason="PodReplaced", message=stale)
    if actual.get("status", {}).get("phase") in ("Failed", "Succeeded"):
        return await pod_lifecycle.ended(p, actual)
    labels = child_labels(p.sandbox)
    have = actual["metadata"].get("labels") or {}
    if any(have.get(key) != value for key, value in labels.items()):
        relabelled = await _put_labels_back(p, actual, labels)
        if relabelled is None:
            return Stop(WAITING)
        actual = relabelled
    if not pod_state.is_ready(actual):
        return _starting(p, actual)
    p.memory.starting.pop(run.key, None)
    if _turns_ready(p, actual):
        _observe_pod_ready(p, actual)
    name = actual["metadata"]["name"]
    if run.status.pod_failures and _ready_for(p) >= STABLE_AFTER:
        run.status.pod_failures = None
    run.set(ConditionState.true(POD_READY, "PodReady", f"pod {name} is ready"))
    p.pod = actual
    return None


async def _put_labels_back(
    p: Pass, pod: dict[str, Any], labels: Mapping[str, str]
) -> dict[str, Any] | None:
    """Put the sandbox's labels back on its pod, as cached: only if the pod is still that
    one (a pod of another sandbox may have taken its name since the cache saw it, and
    these labels say whose egress and tenant a pod is). If it is not (``None``), the pass
    goes no further with it (no Ready, no exec by its name): the pod is read back, as the
    watches may not see it (a pod without the managed-by label is outside their selector),
    and the next pass tries again."""
    s, meta = p.services, pod["metadata"]
    patch = as_seen({"metadata": {"labels": dict(labels)}}, pod)
    namespace, name = meta.get("namespace"), meta["name"]
    try:
        updated = await s.kube.patch(POD.api, namespace, name, patch)
    except (ConflictError, NotFoundError):
        p.run.revisit(after=1)
        try:
            now = await s.kube.get(POD.api, namespace, name)
        except NotFoundError:
            s.cache.remove(POD.name, pod)
            return None
        if controlled_by(now, p.sandbox.metadata.uid):
            s.cache.put(POD.name, now, read=True)
        else:
            s.cache.remove(POD.name, pod)  # another's: its own watch event brings it
        return None
    s.cache.put(POD.name, updated)
    return updated


def _turns_ready(p: Pass, pod: dict[str, Any]) -> bool:
    """Whether this pass sees the pod Ready for the first time: PodReady was not True, and
    if it was Unknown over this same pod (an earlier row stopped the last passes: the
    database down, say), the pod turned Ready since (else it may have been Ready all along)."""
    held = p.run.condition(POD_READY)
    if held is None or held.status == ConditionStatus.FALSE:
        return True
    if held.status == ConditionStatus.TRUE:
        return False
    if p.run.old_status.pod_uid != pod["metadata"].get("uid"):
        return True
    ready_since = pod_state.ready_since(pod)
    return (
        ready_since is not None
        and held.last_transition_time is not None
        and ready_since > held.last_transition_time
    )


def _observe_pod_ready(p: Pass, pod: dict[str, Any]) -> None:
    """The pod_ready step: from the pod's creation to Ready, for a pod made for the sandbox.

    Not for a claimed pool pod: its age is how long it waited in the pool, and the claim
    records no time of its own (its duration is ``craft_pool_claim_duration_seconds``).
    Once per pod: a pass whose status write failed is retried over the same pod.
    """
    if LABEL_CLAIMED_FROM in (pod["metadata"].get("labels") or {}):
        return
    uid = str(pod["metadata"].get("uid"))
    if p.memory.timed_ready.get(p.run.key) == uid:
        return
    started_at = pod_state.created_at(pod)
    if started_at is not None:
        p.memory.timed_ready[p.run.key] = uid
        # Until the pod's own Ready, if it says when: a pass that comes later (after an
        # outage of the database, say) adds nothing of the pod's.
        ready_at = min(pod_state.ready_since(pod) or p.run.now, p.run.now)
        seconds = (ready_at - started_at).total_seconds()
        p.services.metrics.observe_phase(ProvisioningPhase.POD_READY, seconds)


def _ready_for(p: Pass) -> float:
    """Seconds the sandbox's pod has been Ready for it (0: not Ready before this pass)."""
    held = p.run.condition(POD_READY)
    if held is None or held.status != ConditionStatus.TRUE or held.last_transition_time is None:
        return 0.0
    return (p.run.now - held.last_transition_time).total_seconds()


def _volume_needed(p: Pass, pod: dict[str, Any]) -> str | None:
    """Why a claimed warm pod no longer fits: the sandbox now needs a volume of its own (a
    workspace added, the library switched to Job mode), which the pod cannot mount."""
    if LABEL_CLAIMED_FROM not in (pod["metadata"].get("labels") or {}):
        return None
    if claim.needs_own_volume(p.sandbox) is None:
        return None
    return (
        "the sandbox now needs a volume of its own (a workspace, or the library in Job "
        "mode), which the claimed warm pod cannot mount; replacing it with a new pod"
    )


def _claimed_template(p: Pass, pod: dict[str, Any]) -> frozenset[str] | None:
    """For a claimed pool pod, the template hashes it may have (the sandbox's own)."""
    labels = pod["metadata"].get("labels") or {}
    if LABEL_CLAIMED_FROM not in labels:
        return None
    current = sandbox_template_hash(p.sandbox, p.services.settings)
    if labels.get(LABEL_POOL_TEMPLATE_HASH) == current:
        return frozenset({current})  # every pass over a claimed pod: one build, not two
    return claimed_template_hashes(p.sandbox, p.services.settings)


def _starting_since(p: Pass, pod: dict[str, Any]) -> datetime | None:
    """Since when the pod has been getting ready for this sandbox: its creation, or, if
    later, when PodReady last left True (a pod that was Ready and is no longer; a claim
    marks a warm pod's PodReady Unknown): a pod's age alone is not how long it has kept the
    sandbox waiting (a warm pod's age is its time in the pool)."""
    since = _since_status(p, pod)
    uid = str(pod["metadata"].get("uid", ""))
    remembered = p.memory.starting.get(p.run.key)
    if remembered is not None and remembered[0] == uid and since is not None:
        since = min(since, remembered[1])  # an Unknown wait in between restarts no clock
    if since is not None:
        p.memory.starting[p.run.key] = (uid, since)
    return since


def _since_status(p: Pass, pod: dict[str, Any]) -> datetime | None:
    """:func:`_starting_since` as the pod and the stored PodReady condition tell it."""
    created = pod_state.created_at(pod)
    made = p.memory.made.get(p.run.key)
    if made is not None and made[0] == pod["metadata"].get("uid"):
        created = made[1]  # on the clock run.now and the condition's times are on
    held = p.run.condition(POD_READY)
    if held is None or held.last_transition_time is None:
        return created
    if held.status == ConditionStatus.TRUE:
        return p.run.now  # Ready until now
    left = held.last_transition_time
    return left if created is None else max(created, left)


def _starting(p: Pass, pod: dict[str, Any]) -> Stop:
    """The pod is not Ready yet: say why, and time it out after the provisioning timeout."""
    run = p.run
    detail = pod_state.waiting_detail(pod)
    created = _starting_since(p, pod)
    timeout = p.services.settings.provisioning_timeout
    if created and (run.now - created).total_seconds() > timeout:
        held = run.condition(POD_READY)
        if held is None or held.reason != "ProvisioningTimedOut":
            message = f"the pod is not ready after {timeout:.0f}s: {detail}"
            p.event("ProvisioningTimedOut", message, warning=True)
        run.set(ConditionState.false(POD_READY, "ProvisioningTimedOut", detail))
    else:
        run.set(ConditionState.false(POD_READY, "PodStarting", detail))
        if created:
            run.revisit(after=timeout - (run.now - created).total_seconds() + 1)
    return Stop(WAITING)


def _egress_refused(p: Pass, refused: ConditionState) -> Stop:
    """No pod until a NetworkPolicy restricts its egress; said once, when it starts."""
    held = p.run.condition(POD_READY)
    if held is None or held.reason != refused.reason:
        p.event(refused.reason, refused.message, warning=True)
    p.run.set(refused)
    return Stop(refused.reason)


STEP = Step(POD_READY, converge_pod)

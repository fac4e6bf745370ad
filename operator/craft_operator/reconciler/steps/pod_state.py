"""What a pod's own fields say: Ready or not, why it waits, whether it drifted from its spec."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from craft_operator.api.pool import LABEL_POOL_TEMPLATE_HASH
from craft_operator.api.status import MAX_ADMITTED_IMAGES
from craft_operator.builders.naming import ANNOTATION_TEMPLATE_HASH


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def waiting_detail(pod: Mapping[str, Any]) -> str:
    """Why the pod is not ready yet, in one line (a container's waiting reason first)."""
    status = pod.get("status", {})
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "Waiting")
            message = waiting.get("message", "")
            return f"{reason}: {message}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}"
    if status.get("phase") == "Running":  # up, but not Ready (any more): its node, a probe
        conditions = status.get("conditions") or []
        ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        why = f"{ready.get('reason') or ''}: {ready.get('message') or ''}".strip(": ")
        return f"running but not Ready ({why})" if why else "running but not Ready"
    return f"pod phase {status.get('phase') or 'Pending'}"


def failure_detail(pod: Mapping[str, Any]) -> str:
    """What a pod that ended (Failed or Succeeded) says about why: the pod's reason and
    message (an eviction's), and how each container that ended did (``OOMKilled``, exit
    code 137). A container's own termination message is left out: the agent writes it."""
    status = pod.get("status", {})
    why = status.get("reason") or status.get("phase")
    detail = f"pod {pod['metadata']['name']} {status.get('phase', '').lower()}: {why}"
    if status.get("message"):
        detail += f" ({status['message']})"
    ended = terminations(pod)
    if ended:
        detail += f"; {ended}"
    return detail


def terminations(pod: Mapping[str, Any]) -> str:
    """How the pod's containers that ended did, e.g. ``container sandbox: OOMKilled, exit
    code 137`` (empty if none did)."""
    said = []
    for container in pod.get("status", {}).get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated")
        if not isinstance(ended, Mapping):
            continue
        reason = ended.get("reason")
        code = ended.get("exitCode")
        parts = [str(reason)[:64]] if isinstance(reason, str) and reason else []
        if isinstance(code, int):
            parts.append(f"exit code {code}")
        said.append(f"container {str(container.get('name'))[:63]}: {', '.join(parts) or 'ended'}")
    return "; ".join(said)


def drift(
    actual: Mapping[str, Any],
    desired: Mapping[str, Any],
    *,
    claimed_as: Collection[str] | None = None,
    admitted: Sequence[str] | None = None,
) -> str | None:
    """Why the running pod must be replaced to match ``desired``, or ``None``.

    A claimed pool pod (``claimed_as``: the template hashes the sandbox's settings give a
    pool pod) is judged by its pool template instead: it never had the sandbox's own spec.
    """
    if claimed_as is not None:
        labels = actual["metadata"].get("labels") or {}
        if LABEL_POOL_TEMPLATE_HASH not in labels:
            return _hash_removed(f"label {LABEL_POOL_TEMPLATE_HASH}", "the claimed pod")
        if labels[LABEL_POOL_TEMPLATE_HASH] not in claimed_as:
            return "the pod spec changed; replacing the claimed pod with a new one"
        return _image_edited(actual, desired, None)
    have_annotations = actual["metadata"].get("annotations") or {}
    want_annotations = desired["metadata"]["annotations"]
    if ANNOTATION_TEMPLATE_HASH not in have_annotations:
        return _hash_removed(f"annotation {ANNOTATION_TEMPLATE_HASH}", "the pod")
    if have_annotations[ANNOTATION_TEMPLATE_HASH] != want_annotations[ANNOTATION_TEMPLATE_HASH]:
        return "the pod spec changed; replacing the pod"
    return _image_edited(actual, desired, admitted)


def _hash_removed(where: str, pod: str) -> str:
    """Why a pod whose template hash was edited away is replaced: the hash is what tells
    whether it has the sandbox's spec, and it is not recorded elsewhere. Said so, not as a
    spec change, which on-call would look for in vain."""
    return (
        f"the pod's {where}, which records the spec it was made from, is missing (removed by "
        f"hand, say), so it cannot be told to match the sandbox's spec; replacing {pod} with "
        "a new one"
    )


def images_of(pod: Mapping[str, Any]) -> list[Any]:
    """The images of the pod's containers, in order."""
    return [c.get("image") for c in pod.get("spec", {}).get("containers") or []]


def _image_edited(
    actual: Mapping[str, Any], desired: Mapping[str, Any], admitted: Sequence[str] | None
) -> str | None:
    """Whether the pod's images changed since the API server admitted it: the images the
    operator built, or those a mutating webhook made of them at its creation (``admitted``,
    kept in the sandbox's status, where the pod's editors cannot write), so that the
    webhook's change is not taken for an edit and the pod replaced for ever."""
    if admitted:
        edited = admitted_images(actual) != list(admitted)
    else:
        edited = images_of(actual) != images_of(desired)
    if edited:
        return "the pod's image was edited; replacing the pod"
    return None


def admitted_images(pod: Mapping[str, Any]) -> list[str]:
    """The images of the pod's containers as a sandbox's status keeps them (the first
    :data:`MAX_ADMITTED_IMAGES`)."""
    return [str(image) for image in images_of(pod)[:MAX_ADMITTED_IMAGES]]


def created_at(pod: Mapping[str, Any]) -> datetime | None:
    """The pod's creationTimestamp, if readable."""
    return _moment(pod["metadata"].get("creationTimestamp"))


#: How long past its grace period a pod being deleted is overdue (then looked at once a
#: minute, and said to be held).
TERMINATING_OVERDUE = timedelta(seconds=60)


def stuck_terminating(pod: Mapping[str, Any], now: datetime) -> str | None:
    """What to say of a pod still being deleted :data:`TERMINATING_OVERDUE` past its grace
    period (its deletionTimestamp: the delete's time plus the grace period), if it is; a
    finalizer on it or an unreachable node may hold it for hours."""
    due = _moment(pod["metadata"].get("deletionTimestamp"))
    if due is None or now - due <= TERMINATING_OVERDUE:
        return None
    return (
        f"pod {pod['metadata']['name']} is still being deleted, past its grace period since "
        f"{due.isoformat()}: a finalizer on it or an unreachable node holds it"
    )


def overdue_in(pod: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until a pod being deleted is :data:`TERMINATING_OVERDUE` past its grace
    period (negative once it is), ``None`` if it is not being deleted: a pass then, as a
    pod held there sends no event that would bring one."""
    due = _moment(pod["metadata"].get("deletionTimestamp"))
    return None if due is None else (due + TERMINATING_OVERDUE - now).total_seconds()


def ready_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's Ready condition last changed (its kubelet's word), if readable."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return _moment(condition.get("lastTransitionTime"))
    return None


def _moment(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def restart_backoff(base: float, failures: int) -> float:
    """How long to wait before replacing a pod after ``failures`` failures in a row."""
    return float(min(300.0, base * 2 ** max(0, failures - 1)))

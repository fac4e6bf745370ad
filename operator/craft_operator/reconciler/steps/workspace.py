"""The workspace (``spec.workspace``): a PVC the pod mounts, kept across sleep and wake.

Converged before the pod (its failures are the pod's: ``WorkspaceNameTaken``,
``WorkspaceWriteFailed``), grown when the spec's size grows (a
refused expansion is said in an event and ``status.workspace.message``; the pod keeps
running), and on deletion either deleted with the sandbox or, with ``retain``, kept: such
a PVC carries no owner reference to the sandbox (the garbage collector never deletes it,
whatever the deletion's propagation), and a new sandbox of the same name and user takes it
back. A sandbox with a workspace starts cold: a warm
pod cannot mount a user's volume.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from craft_operator.api.base import check_quantity, quantity_value
from craft_operator.api.models import CraftSandbox, WorkspaceStatus
from craft_operator.builders.naming import (
    LABEL_ONYX_SANDBOX_ID,
    LABEL_USER_ID,
    child_labels,
    owner_reference,
)
from craft_operator.builders.workspace import (
    LABEL_RETAINED,
    build_workspace_pvc,
    has_controller,
    is_retained_for,
)
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError, NotFoundError
from craft_operator.reconciler.children import (
    ForeignObjectError,
    as_seen,
    controlled_by,
    converge,
    drift_patch,
)
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.reconciler.steps import volume_growth
from craft_operator.status import POD_READY

log = logging.getLogger(__name__)

PVC = kinds.PVC
#: Why a sandbox with a workspace is never given a pre-started (warm) pod.
COLD_START = "WorkspaceNeedsColdStart"
#: PodReady's reason when spec.workspace.size is no size the operator can ask for.
SIZE_INVALID = "WorkspaceSizeInvalid"


class RetainedForAnotherError(ForeignObjectError):
    """The workspace's name is held by a workspace kept (``retain``) from an earlier
    CraftSandbox of this name for another user or tenant: ``WorkspaceNameTaken``, whose
    advice must not be to delete it (its files are that user's)."""

    def __init__(self, namespace: str | None, name: str, retained_from: str) -> None:
        super().__init__("PersistentVolumeClaim", namespace, name)
        Exception.__init__(  # the message, in place of the generic "rename or delete it"
            self,
            f"PersistentVolumeClaim {namespace}/{name} is a workspace retained from an earlier "
            f"CraftSandbox {retained_from!r} for another user or tenant, kept with that "
            "user's files and left alone; give this sandbox another name (delete the PVC "
            "only if that user's files may go)",
        )


def _not_ours(pvc: Mapping[str, Any]) -> ForeignObjectError:
    """The error for ``pvc``, which holds the workspace's name but is not this sandbox's:
    said as a workspace retained for another user or tenant when it is one."""
    meta = pvc.get("metadata") or {}
    retained_from = (meta.get("labels") or {}).get(LABEL_RETAINED)
    if meta.get("deletionTimestamp") or has_controller(pvc) or not retained_from:
        return ForeignObjectError.of("PersistentVolumeClaim", pvc)
    return RetainedForAnotherError(meta.get("namespace"), str(meta.get("name")), retained_from)


def cold_start_reason(sandbox: CraftSandbox) -> str | None:
    """Why ``sandbox`` cannot take a warm pod from a pool (``None``: it can).

    A warm pod was started before it knew its user, so it cannot mount the user's volume.
    """
    return COLD_START if sandbox.spec.workspace is not None else None


async def converge_workspace(p: Pass) -> Stop | None:
    """Create or adopt the workspace PVC and grow it to the spec's size.

    The spec's model refuses a size that is no quantity or out of range, so the sandbox is
    ``InvalidSpec`` before this step; should one reach it all the same, it fails the pod
    with ``WorkspaceSizeInvalid`` rather than raise, and no PVC is written.
    """
    workspace = p.sandbox.spec.workspace
    if workspace is None:
        p.run.status.workspace = None
        return None
    want = str(workspace.size)
    try:  # the model's rules, again (see above)
        check_quantity(workspace.size, "spec.workspace.size", minimum=1)
    except ValueError as exc:
        return p.fail_spec(SIZE_INVALID, f"{exc}, not {want[:64]!r}")
    wanted = quantity_value(want)
    desired = build_workspace_pvc(p.sandbox)
    try:
        pvc = await _owned(p, desired)
    except ForeignObjectError as exc:
        # WorkspaceTerminating (an earlier sandbox's PVC still being deleted: it waits for
        # the pods using it to stop) or WorkspaceNameTaken. No claim of this sandbox's: not
        # the one named before.
        p.run.status.workspace = None
        return p.fail(POD_READY, exc.reason("Workspace"), str(exc))
    except ApiError as exc:
        p.run.status.workspace = None
        return p.fail(POD_READY, "WorkspaceWriteFailed", f"cannot write the workspace: {exc}")
    message, refused = None, None
    have = requested_size(pvc)
    had = size_value(have)
    if had is not None and wanted > had:
        try:
            pvc, message = await volume_growth.grow(p, pvc, want, what="the workspace")
            refused = message
        except ApiError as exc:
            return p.fail(POD_READY, "WorkspaceWriteFailed", f"cannot resize: {exc}")
    elif had is not None and wanted < had:
        message = f"the workspace is {have}, larger than spec.workspace.size ({want}): kept"
    if pvc["metadata"].get("deletionTimestamp"):
        message = "the workspace PVC is being deleted: a new, empty one follows once it is gone"
    _report(p, pvc, message, refused, _other_class(pvc, workspace.storage_class_name))
    return None


def _other_class(pvc: Mapping[str, Any], wanted: str | None) -> str | None:
    """What to say of a PVC of another storage class than the spec names (a retained one
    taken back: a volume cannot change class, and its files are kept over the class)."""
    have = pvc.get("spec", {}).get("storageClassName")
    if wanted is None or have is None or have == wanted:
        return None
    return (
        f"the workspace PVC is of storage class {have}, not {wanted} "
        "(spec.workspace.storageClassName): a retained workspace keeps its class and files"
    )


async def _owned(p: Pass, desired: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's PVC: created if missing, its labels put back, or a retained one adopted."""
    s = p.services
    if "ownerReferences" not in desired["metadata"]:
        return await _kept(p, desired)
    try:
        result = await converge(s.kube, s.cache, PVC.api, PVC.name, desired)
    except ForeignObjectError as exc:
        if exc.leaving:
            raise
        meta = desired["metadata"]
        found = s.cache.get(PVC.name, meta["namespace"], meta["name"])
        if found is None:
            found = await s.kube.get(PVC.api, meta["namespace"], meta["name"])
        if not _ours_unowned(p, found):
            raise _not_ours(found) from None
        return await _adopt(p, found)
    if result.action != "unchanged":
        name = desired["metadata"]["name"]
        p.event(f"Workspace{result.action.capitalize()}", f"{result.action} PVC {name}")
    return result.obj


async def _kept(p: Pass, desired: dict[str, Any]) -> dict[str, Any]:
    """The PVC of a workspace to keep (``retain``), which no owner reference ties to the
    sandbox: created so, or one the sandbox owned released now (``retain`` set since), or the
    one kept for this name and user (an earlier sandbox's: taken back), its labels put back."""
    s, meta = p.services, desired["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    found = s.cache.get(PVC.name, namespace, name)
    if found is None:
        try:
            created = await s.kube.create(PVC.api, desired)
        except ConflictError:
            found = await s.kube.get(PVC.api, namespace, name)
        else:
            s.cache.put(PVC.name, created)
            p.event("WorkspaceCreated", f"created PVC {name}")
            return created
    uid = p.sandbox.metadata.uid
    if found["metadata"].get("deletionTimestamp"):
        labels = found["metadata"].get("labels") or {}
        if controlled_by(found, uid) or (
            _ours_unowned(p, found) and labels.get(LABEL_ONYX_SANDBOX_ID) == uid
        ):
            return found  # this sandbox's own, deleted by someone: said in status
        raise ForeignObjectError.of("PersistentVolumeClaim", found)
    if controlled_by(found, uid):
        return await _keep(p, found, desired, uid or "")
    if not _ours_unowned(p, found):
        raise _not_ours(found)
    earlier = not _own_kept(p, found)  # (its labels edited away, the status still knows it)
    patch = drift_patch(found, desired)
    if patch:  # only onto the PVC as read: never onto one that replaced it since (409)
        found = await _patch(s, found, as_seen(patch, found))
    if earlier:
        p.event("WorkspaceAdopted", f"took back the retained workspace PVC {name}")
    return found


def _ours_unowned(p: Pass, pvc: Mapping[str, Any]) -> bool:
    """Whether ``pvc``, controlled by no one, is this sandbox's to take: kept for its name
    and user (its labels), or the very claim its status records (labels edited since)."""
    meta = pvc.get("metadata", {})
    if has_controller(pvc):
        return False
    if is_retained_for(dict(pvc), p.sandbox):
        return True
    recorded = p.run.old_status.workspace
    return (
        recorded is not None
        and recorded.claim_uid is not None
        and (meta.get("uid") == recorded.claim_uid)
    )


def _own_kept(p: Pass, pvc: Mapping[str, Any]) -> bool:
    """Whether ``pvc`` is this very sandbox's workspace, kept without an owner (not an
    earlier sandbox's: taking that one back is the workspace step's, in a whole pass)."""
    labels = pvc.get("metadata", {}).get("labels") or {}
    mine = labels.get(LABEL_ONYX_SANDBOX_ID) == p.sandbox.metadata.uid
    recorded = p.run.old_status.workspace
    claimed = recorded is not None and recorded.claim_uid == pvc.get("metadata", {}).get("uid")
    return _ours_unowned(p, pvc) and (mine or claimed)


async def settle_owner(p: Pass) -> None:
    """Give the sandbox's existing workspace PVC the owner reference ``retain`` asks for (off
    while kept, on otherwise), in a pass that stops before the workspace's row: a foreground
    deletion must not take a PVC that ``retain`` keeps because the credentials failed."""
    if p.sandbox.spec.workspace is None:
        return
    desired = build_workspace_pvc(p.sandbox)
    meta = desired["metadata"]
    found = p.services.cache.get(PVC.name, meta["namespace"], meta["name"])
    if found is None or found["metadata"].get("deletionTimestamp"):
        return
    uid = p.sandbox.metadata.uid or ""
    try:
        if p.sandbox.spec.workspace.retain and controlled_by(found, uid):
            await _keep(p, found, desired, uid)
        elif not p.sandbox.spec.workspace.retain and _own_kept(p, found):
            await _adopt(p, found)
    except ApiError as exc:  # the workspace's own step, in a later pass, tries again
        log.warning("%s/%s: cannot settle the workspace's owner: %s", *p.run.key, exc)


async def _keep(p: Pass, pvc: dict[str, Any], desired: dict[str, Any], uid: str) -> dict[str, Any]:
    """``retain`` set on a sandbox whose PVC it owns: the owner reference goes (the garbage
    collector must never delete it), the retained workspace's labels come."""
    meta = pvc["metadata"]
    others = [ref for ref in meta.get("ownerReferences") or [] if ref.get("uid") != uid]
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": desired["metadata"]["labels"],
            "ownerReferences": others or None,
        }
    }
    kept = await _patch(p.services, pvc, patch)
    p.event(
        "WorkspaceRetained",
        f"the workspace PVC {meta['name']} no longer belongs to the CraftSandbox (retain): "
        "deleting the sandbox keeps it",
    )
    return kept


async def _patch(s: Services, pvc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Write ``patch`` to ``pvc`` and cache the result; on a 409 (``pvc`` changed or was
    replaced since it was read) forget it, so the next pass reads it anew, and raise."""
    meta = pvc["metadata"]
    try:
        patched = await s.kube.patch(PVC.api, meta.get("namespace"), meta["name"], patch)
    except ConflictError:
        s.cache.forget(PVC.name, meta.get("namespace"), meta["name"])
        raise
    s.cache.put(PVC.name, patched)
    return patched


async def _adopt(p: Pass, pvc: dict[str, Any]) -> dict[str, Any]:
    """Take a workspace retained from this user's earlier sandbox of the same name."""
    s, meta = p.services, pvc["metadata"]
    others = [ref for ref in meta.get("ownerReferences") or [] if not ref.get("controller")]
    labels: dict[str, str | None] = {**child_labels(p.sandbox), LABEL_RETAINED: None}
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": labels,
            "ownerReferences": [*others, owner_reference(p.sandbox)],
        }
    }
    adopted = await _patch(s, pvc, patch)
    if (meta.get("labels") or {}).get(LABEL_ONYX_SANDBOX_ID) == p.sandbox.metadata.uid:
        message = (
            f"the workspace PVC {meta['name']} belongs to the CraftSandbox again (retain unset)"
        )
        p.event("WorkspaceUpdated", f"{message}: deleting the sandbox deletes it")
    else:
        p.event("WorkspaceAdopted", f"took back the retained workspace PVC {meta['name']}")
    return adopted


def size_value(text: str | None) -> Decimal | None:
    """The value of the PVC's requested size; ``None`` (not compared) if there is none or
    it is not one the operator reads."""
    if text is None:
        return None
    try:
        return quantity_value(text)
    except ValueError:
        return None


def requested_size(pvc: Mapping[str, Any]) -> str | None:
    """The size a PVC asks for, as written (``None``: none)."""
    storage = pvc.get("spec", {}).get("resources", {}).get("requests", {}).get("storage")
    return None if storage is None else str(storage)


def _report(
    p: Pass,
    pvc: Mapping[str, Any],
    message: str | None,
    refused: str | None = None,
    other_class: str | None = None,
) -> None:
    """``status.workspace``; each note of its message is said in an event once, when it
    starts (a refused resize, a deletion, a larger or another class's PVC kept)."""
    workspace = p.sandbox.spec.workspace
    assert workspace is not None
    observed = pvc.get("status") or {}
    before = p.run.old_status.workspace
    said = (before.message or "") if before is not None else ""
    if message is not None and message not in said:
        if message == refused:
            p.event("WorkspaceResizeRefused", message, warning=True)
        elif pvc["metadata"].get("deletionTimestamp"):
            p.event("WorkspaceDeleting", message, warning=True)
        else:
            p.event("WorkspaceLargerThanSpec", message)
    if other_class is not None and other_class not in said:
        p.event("WorkspaceStorageClassKept", other_class, warning=True)
    if other_class is not None:
        message = other_class if message is None else f"{message}; {other_class}"
    p.run.status.workspace = WorkspaceStatus(
        claim_name=pvc["metadata"]["name"],
        claim_uid=pvc["metadata"].get("uid"),
        requested=requested_size(pvc),
        capacity=(observed.get("capacity") or {}).get("storage"),
        phase=observed.get("phase"),
        retain=workspace.retain,
        message=message,
    )


def retains_workspace(body: Mapping[str, Any]) -> bool:
    """Whether the sandbox ``body`` asks to keep its workspace after deletion.

    Read from the raw object: a sandbox whose spec no longer parses is still deleted.
    """
    workspace = (body.get("spec") or {}).get("workspace")
    return isinstance(workspace, Mapping) and workspace.get("retain") is True


async def release(s: Services, body: Mapping[str, Any]) -> bool:
    """On deletion with ``retain``: keep the workspace, no longer owned by the sandbox.

    Its owner reference is removed (so the garbage collector leaves it) and it is labelled
    as retained from this sandbox (the user-id label stays, for a successor to match).
    ``True`` if it is kept (released now, or kept without an owner since ``retain`` was
    set). Raises :class:`ApiError` when that may work later.
    """
    meta = body["metadata"]
    name, uid = meta["name"], meta.get("uid", "")
    pvc = await _claim_of(s, body)
    if pvc is None or pvc["metadata"].get("deletionTimestamp"):
        return False
    if not controlled_by(pvc, uid):
        # Kept from the start (retain set before): no owner reference to remove.
        return _kept_for(pvc, body)
    pvc_meta = pvc["metadata"]
    refs = [ref for ref in pvc_meta.get("ownerReferences") or [] if ref.get("uid") != uid]
    patch = {
        "metadata": {
            "resourceVersion": pvc_meta.get("resourceVersion"),
            "labels": {LABEL_RETAINED: name},
            "ownerReferences": refs or None,
        }
    }
    await _patch(s, pvc, patch)
    return True


async def delete_unkept(s: Services, body: Mapping[str, Any]) -> None:
    """On deletion without ``retain``: delete the workspace still kept without an owner
    from when ``retain`` was set (no pass put the owner back since), which neither the
    collector nor the children's deletion would take. Raises :class:`ApiError` when that
    may work later."""
    pvc = await _claim_of(s, body)
    if pvc is None or pvc["metadata"].get("deletionTimestamp") or not _kept_for(pvc, body):
        return
    namespace, claim = pvc["metadata"].get("namespace", ""), pvc["metadata"]["name"]
    try:
        await s.kube.delete(PVC.api, namespace, claim, uid=pvc["metadata"].get("uid"))
    except ConflictError:
        return  # the uid precondition failed: another PVC by that name now
    s.cache.forget(PVC.name, namespace, claim)


async def _claim_of(s: Services, body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The workspace PVC of the sandbox ``body`` as the cache has it, else as the API server
    does (the watches see only labelled objects), or ``None`` if there is none."""
    meta = body["metadata"]
    namespace, claim = meta.get("namespace", ""), meta["name"] + kinds.WORKSPACE_SUFFIX
    pvc = s.cache.get(PVC.name, namespace, claim)
    if pvc is not None:
        return pvc
    try:
        return await s.kube.get(PVC.api, namespace, claim)
    except NotFoundError:
        return None


def _kept_for(pvc: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether ``pvc`` is the workspace kept, without an owner, for the sandbox ``body``."""
    labels = pvc.get("metadata", {}).get("labels") or {}
    user = ((body.get("spec") or {}).get("user") or {}).get("id")
    return (
        not has_controller(pvc)
        and labels.get(LABEL_RETAINED) == body["metadata"]["name"]
        and labels.get(LABEL_ONYX_SANDBOX_ID) == body["metadata"].get("uid")
        and isinstance(user, str)
        and labels.get(LABEL_USER_ID) == user.lower()  # as the model (and so the label) has it
    )


#: Owns no condition: the pod mounts it, so its failures are reported on PodReady.
STEP = Step(None, converge_workspace)

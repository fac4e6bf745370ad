"""The workspace (``spec.workspace``): its PVC, and the volume and mount the pod gets.

The PVC is the sandbox's child, not the pod's: it outlives sleep, wake and a new pod. Only
its name reaches the pod, so a resize changes the PVC and never the pod template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import GROUP, WORKSPACE_MOUNT, CraftSandbox
from craft_operator.builders.naming import LABEL_ONYX_TENANT_ID, LABEL_USER_ID, child_metadata
from craft_operator.kube.kinds import WORKSPACE_SUFFIX

VOLUME_NAME = "workspace"
#: On a workspace kept after its sandbox was deleted (``retain``): the sandbox's name.
LABEL_RETAINED = f"{GROUP}/retained-from"


def workspace_claim_name(sandbox: CraftSandbox) -> str:
    """``<name>-workspace``: the PVC holding the sandbox's workspace."""
    return sandbox.metadata.name + WORKSPACE_SUFFIX


def build_workspace_pvc(sandbox: CraftSandbox) -> dict[str, Any]:
    """The workspace PVC: ReadWriteOnce, the spec's size and storage class (if it names one).

    Owned by the sandbox (deleted with it), unless ``retain``: a workspace to keep is never
    the garbage collector's, whatever the deletion's propagation (a foreground deletion, as
    Argo CD prunes, deletes every owned object at once, before any finalizer runs). It is
    then kept as a retained workspace is, labelled ``retained-from`` and the user's id, from
    the start. Call only for a sandbox with ``spec.workspace``.
    """
    workspace = sandbox.spec.workspace
    assert workspace is not None, "only a sandbox with spec.workspace has one"
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(workspace.size)}},
    }
    if workspace.storage_class_name:
        spec["storageClassName"] = workspace.storage_class_name
    metadata = child_metadata(sandbox, workspace_claim_name(sandbox))
    if workspace.retain:
        del metadata["ownerReferences"]
        metadata["labels"][LABEL_RETAINED] = sandbox.metadata.name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def workspace_volumes(sandbox: CraftSandbox) -> list[dict[str, Any]]:
    """The pod's volume for the workspace PVC (none without ``spec.workspace``)."""
    if sandbox.spec.workspace is None:
        return []
    claim = {"claimName": workspace_claim_name(sandbox)}
    return [{"name": VOLUME_NAME, "persistentVolumeClaim": claim}]


def workspace_mounts(sandbox: CraftSandbox) -> list[dict[str, Any]]:
    """The sandbox container's mount of the workspace at ``/workspace/sessions`` (or none).

    The pod's fsGroup (uid 1000) makes the volume writable for the agent.
    """
    if sandbox.spec.workspace is None:
        return []
    return [{"name": VOLUME_NAME, "mountPath": WORKSPACE_MOUNT}]


def has_controller(obj: Mapping[str, Any]) -> bool:
    """Whether anything holds a controller owner reference to ``obj``."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("controller") for ref in refs)


def is_retained_for(pvc: dict[str, Any], sandbox: CraftSandbox) -> bool:
    """Whether ``pvc`` is a workspace retained from a sandbox of this name, user and tenant.

    Such a PVC is the user's own, kept by ``retain`` after their sandbox was deleted; it has
    no controller any more. Anything else by that name is never taken over: a user id names
    a user only within its tenant, so a sandbox naming the same id in another tenant never
    gets this tenant's files.
    """
    labels = pvc.get("metadata", {}).get("labels") or {}
    return (
        not has_controller(pvc)
        and labels.get(LABEL_RETAINED) == sandbox.metadata.name
        and labels.get(LABEL_USER_ID) == sandbox.spec.user.id
        and labels.get(LABEL_ONYX_TENANT_ID) == sandbox.spec.user.tenant_id
    )

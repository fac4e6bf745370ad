"""Names, labels and owner references shared by every child of a CraftSandbox."""

from __future__ import annotations

from typing import Any

from craft_operator.api import constants, models
from craft_operator.api.models import CraftSandbox

# The managed-by label (the watches' filter) and the children's name suffixes
# (``<name><suffix>``) are facts of the registry of kinds; re-exported for the builders.
from craft_operator.kube.kinds import LABEL_MANAGED_BY as LABEL_MANAGED_BY
from craft_operator.kube.kinds import LIBRARY_SUFFIX as LIBRARY_SUFFIX
from craft_operator.kube.kinds import MANAGED_BY as MANAGED_BY
from craft_operator.kube.kinds import SECRET_SUFFIX as SECRET_SUFFIX
from craft_operator.kube.kinds import SKILLS_SUFFIX as SKILLS_SUFFIX

APP_NAME = "craft-sandbox"
LABEL_SANDBOX = constants.LABEL_SANDBOX
LABEL_USER_ID = f"{models.GROUP}/user-id"
#: Labels Onyx's egress proxy uses to map a pod to its sandbox and tenant.
LABEL_ONYX_SANDBOX_ID = "onyx.app/sandbox-id"
LABEL_ONYX_TENANT_ID = "onyx.app/tenant-id"
LABEL_COMPONENT = "app.kubernetes.io/component"

ANNOTATION_TEMPLATE_HASH = f"{models.GROUP}/pod-template-hash"
ANNOTATION_PAT_ID = f"{models.GROUP}/pat-id"
ANNOTATION_SKILL_HASH = f"{models.GROUP}/skill-hash"
#: A digest of the spec's sources the SKILL.md was rendered for.
ANNOTATION_SOURCES_HASH = f"{models.GROUP}/sources-hash"

SECRET_KEY_PAT = "ONYX_PAT"  # noqa: S105 -- the key name, not a secret
SKILL_KEY = "SKILL.md"
SANDBOX_CONTAINER = "sandbox"

#: Label selector matching every object the operator manages (its watches use it).
MANAGED_SELECTOR = {LABEL_MANAGED_BY: MANAGED_BY}


def secret_name(sandbox: CraftSandbox) -> str:
    """``<name>-credentials``: the Secret holding the sandbox's PAT."""
    return sandbox.metadata.name + SECRET_SUFFIX


def skills_configmap_name(sandbox: CraftSandbox) -> str:
    """``<name>-skills``: the ConfigMap holding the rendered SKILL.md."""
    return sandbox.metadata.name + SKILLS_SUFFIX


def pod_name(sandbox: CraftSandbox) -> str:
    """The sandbox pod is named like the CraftSandbox."""
    return sandbox.metadata.name


def child_labels(sandbox: CraftSandbox) -> dict[str, str]:
    """Labels on every child: ours, the recommended ones, and Onyx's egress-proxy labels."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "sandbox",
        LABEL_SANDBOX: sandbox.metadata.name,
        LABEL_USER_ID: sandbox.spec.user.id,
        LABEL_ONYX_SANDBOX_ID: sandbox.metadata.uid or "",
        LABEL_ONYX_TENANT_ID: sandbox.spec.user.tenant_id,
    }


def owner_reference(sandbox: CraftSandbox) -> dict[str, Any]:
    """The controller ownerReference that ties a child to its CraftSandbox."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.KIND,
        "name": sandbox.metadata.name,
        "uid": sandbox.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(
    sandbox: CraftSandbox, name: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """Metadata for a child object: name, namespace, labels, owner, optional annotations."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": sandbox.metadata.namespace,
        "labels": child_labels(sandbox),
        "ownerReferences": [owner_reference(sandbox)],
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata

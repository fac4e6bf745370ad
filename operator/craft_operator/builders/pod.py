"""The sandbox pod: the agent's container with skills, the user library and the PAT's volume."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from craft_operator.api.models import CraftSandbox, CraftSandboxSpec, LibraryMode
from craft_operator.builders.naming import (
    ANNOTATION_TEMPLATE_HASH,
    SANDBOX_CONTAINER,
    SKILL_KEY,
    child_metadata,
    pod_name,
    skills_configmap_name,
)
from craft_operator.builders.quantities import overcommit_problem, parse_quantity
from craft_operator.builders.security import (
    container_security_context,
    pod_security_context,
)
from craft_operator.builders.workspace import workspace_mounts, workspace_volumes
from craft_operator.config import Settings

SKILLS_MOUNT = "/workspace/skills/company-search"
LIBRARY_MOUNT = "/workspace/user_library"
#: Where the operator delivers the PAT into the running pod (``pat``: read by the image's
#: onyx-cli wrapper); a memory-backed volume, so the token never touches a node's disk.
CREDENTIALS_MOUNT = "/run/onyx"
PAT_FILE = f"{CREDENTIALS_MOUNT}/pat"
CREDENTIALS_VOLUME = "onyx-credentials"


class SandboxConfigError(ValueError):
    """The spec and the settings together cannot make a valid pod; the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def server_url_for(sandbox: CraftSandbox, settings: Settings) -> str:
    """``spec.serverURL``, else ``CRAFT_SERVER_URL``; a :class:`SandboxConfigError` if neither."""
    url = sandbox.spec.server_url or settings.server_url
    if not url:
        raise SandboxConfigError(
            "NoServerURL",
            "no Onyx server URL: set spec.serverURL or the operator's CRAFT_SERVER_URL",
        )
    return url


def resources_for(sandbox: CraftSandbox, settings: Settings) -> dict[str, dict[str, str]]:
    """Settings' default resources overlaid with the spec's, checked so requests <= limits.

    A request raised above the default limit lifts that limit with it (the user asked for
    more, not for an invalid pod); a default request above a limit the spec sets follows
    that limit down (as Kubernetes defaults a missing request to the limit); a request the
    spec sets above a limit the spec sets is an error.
    """
    requests = dict(settings.sandbox_resources.get("requests", {}))
    limits = dict(settings.sandbox_resources.get("limits", {}))
    spec = sandbox.spec.resources
    spec_requests = (
        {key: str(value) for key, value in (spec.requests or {}).items()} if spec else {}
    )
    spec_limits = {key: str(value) for key, value in (spec.limits or {}).items()} if spec else {}
    requests.update(spec_requests)
    limits.update(spec_limits)
    for kind, quantities in (("requests", requests), ("limits", limits)):
        for resource, quantity in quantities.items():
            try:
                parse_quantity(quantity)
            except ValueError as exc:
                raise SandboxConfigError(
                    "InvalidResources", f"resources.{kind}.{resource}: {exc}"
                ) from None
    for resource, request in requests.items():
        limit = limits.get(resource)
        if limit is None or parse_quantity(request) <= parse_quantity(limit):
            continue
        if resource in spec_limits:
            if resource not in spec_requests:
                requests[resource] = limit
                continue
            raise SandboxConfigError(
                "InvalidResources",
                f"resources.requests.{resource} ({request}) is above "
                f"resources.limits.{resource} ({limit})",
            )
        limits[resource] = request
    for resource in sorted({*requests, *limits}):
        problem = overcommit_problem(resource, requests.get(resource), limits.get(resource))
        if problem is not None:
            raise SandboxConfigError("InvalidResources", problem)
    result: dict[str, dict[str, str]] = {}
    if requests:
        result["requests"] = requests
    if limits:
        result["limits"] = limits
    return result


def library_volume(sandbox: CraftSandbox, claim_name: str | None) -> dict[str, Any]:
    """An emptyDir in Exec mode; the library PVC in Job mode."""
    if sandbox.spec.user_library.mode == LibraryMode.JOB:
        if not claim_name:
            raise SandboxConfigError("NoLibraryVolume", "Job mode needs the library volume claim")
        return {"name": "user-library", "persistentVolumeClaim": {"claimName": claim_name}}
    return {"name": "user-library", "emptyDir": {}}


def credentials_volume() -> dict[str, Any]:
    """The memory-backed volume the PAT is delivered into (small: it holds one token)."""
    return {"name": CREDENTIALS_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def credentials_mount() -> dict[str, Any]:
    """Where the sandbox container sees the delivered PAT."""
    return {"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_MOUNT}


def template_hash(pod: dict[str, Any]) -> str:
    """A short, stable hash of everything in the pod the operator decides."""
    canonical = json.dumps(pod, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def sandbox_container(
    sandbox: CraftSandbox, settings: Settings, mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The agent's container: image, the server URL, resources, security, and ``mounts``.

    The PAT is not in the spec: the operator writes it into the running pod (see
    :data:`PAT_FILE`), so a renewed one reaches the agent without replacing the pod. A
    warm pool pod is the same container with its own mounts (:mod:`.pool`).
    """
    return {
        "name": SANDBOX_CONTAINER,
        "image": sandbox.spec.image or settings.sandbox_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "ONYX_SERVER_URL", "value": server_url_for(sandbox, settings)}],
        "resources": resources_for(sandbox, settings),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }


def _sandbox_mounts(sandbox: CraftSandbox) -> list[dict[str, Any]]:
    """The sandbox pod's mounts: skills (its ConfigMap), library, the PAT's volume, workspace."""
    return [
        {"name": "skills", "mountPath": SKILLS_MOUNT, "readOnly": True},
        {"name": "user-library", "mountPath": LIBRARY_MOUNT},
        credentials_mount(),
        *workspace_mounts(sandbox),
    ]


def scheduling(spec: CraftSandboxSpec) -> dict[str, Any]:
    """The pod spec's fields for where and how it runs, only those the spec sets."""
    fields: dict[str, Any] = {}
    if spec.runtime_class_name:
        fields["runtimeClassName"] = spec.runtime_class_name
    if spec.node_selector:
        fields["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        fields["tolerations"] = [
            toleration.model_dump(by_alias=True, exclude_none=True, mode="json")
            for toleration in spec.tolerations
        ]
    if spec.priority_class_name:
        fields["priorityClassName"] = spec.priority_class_name
    return fields


def build_pod(
    sandbox: CraftSandbox,
    settings: Settings,
    *,
    library_claim: str | None = None,
) -> dict[str, Any]:
    """The desired sandbox pod, annotated with the hash the reconciler compares."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [sandbox_container(sandbox, settings, _sandbox_mounts(sandbox))],
        "volumes": [
            {
                "name": "skills",
                "configMap": {
                    "name": skills_configmap_name(sandbox),
                    "items": [{"key": SKILL_KEY, "path": SKILL_KEY}],
                },
            },
            library_volume(sandbox, library_claim),
            credentials_volume(),
            *workspace_volumes(sandbox),
        ],
        **scheduling(sandbox.spec),
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": child_metadata(sandbox, pod_name(sandbox)),
        "spec": pod_spec,
    }
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_TEMPLATE_HASH] = template_hash(pod)
    return pod

"""The Onyx backend's identity on the real control plane, with exactly the RBAC it ships.

``manifests/backend`` binds the Role on CraftSandboxes to ServiceAccount ``onyx/onyx-backend``
in a sandbox namespace; :func:`backend_kubeconfig` makes that ServiceAccount, applies the
manifests there, waits until the authorizer grants it, and writes a kubeconfig with a
TokenRequest token of it, as a backend pod would hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cluster import REPO, ApiError, Cluster, wait_for

BACKEND_ACCOUNT = ("onyx", "onyx-backend")
BACKEND_USER = f"system:serviceaccount:{BACKEND_ACCOUNT[0]}:{BACKEND_ACCOUNT[1]}"
BACKEND_MANIFESTS = REPO / "manifests" / "backend"


def _create_if_missing(
    cluster: Cluster, path: str, namespace: str | None, body: dict[str, Any]
) -> None:
    try:
        cluster.create(path, namespace, body)
    except ApiError as error:
        if error.status != 409:
            raise


def allowed(cluster: Cluster, namespace: str, verb: str) -> bool:
    """Whether the authorizer lets the backend ``verb`` CraftSandboxes in ``namespace``."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": BACKEND_USER,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{BACKEND_ACCOUNT[0]}"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": "craft.onyx.app",
                "resource": "craftsandboxes",
            },
        },
    }
    answer = cluster.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer.get("status", {}).get("allowed"))


def backend_identity(cluster: Cluster) -> None:
    """Namespace ``onyx`` and its ServiceAccount ``onyx-backend`` (once per control plane)."""
    namespace, name = BACKEND_ACCOUNT
    _create_if_missing(
        cluster,
        "/api/v1/namespaces",
        None,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    _create_if_missing(
        cluster,
        "/api/v1/serviceaccounts",
        namespace,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )


def backend_kubeconfig(cluster: Cluster, namespace: str, path: Path) -> Path:
    """A kubeconfig of the backend's ServiceAccount, granted ``manifests/backend`` in
    ``namespace`` only."""
    backend_identity(cluster)
    cluster.kubectl("apply", "-n", namespace, "-k", str(BACKEND_MANIFESTS))
    wait_for(
        lambda: allowed(cluster, namespace, "patch"),
        what=f"the backend's Role in force in {namespace}",
    )
    return cluster.service_account_kubeconfig(path, BACKEND_ACCOUNT)

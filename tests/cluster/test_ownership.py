"""Only what it owns: on a real API server, the operator never adopts, rewrites or deletes an
object someone else made under one of its children's names, even one that copies its labels.

The sandbox reports the clash on the condition of the child it cannot make; the object
survives the sandbox's creation and its deletion, uid and content unchanged.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_lifecycle import (
    SANDBOXES,
    SECRETS,
    pats,
    sandbox,
    until,
)
from tests.support.cluster import Cluster, wait_for
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

PODS, PVCS = "/api/v1/pods", "/api/v1/persistentvolumeclaims"
#: The labels the operator puts on its children, copied by someone who hopes to be adopted.
COPIED_LABELS = {
    "app.kubernetes.io/managed-by": "craft-operator",
    "app.kubernetes.io/name": "craft-sandbox",
    "craft.onyx.app/sandbox": "alice",
}


def foreign_pod(labels: dict[str, str]) -> dict[str, Any]:
    """Someone's own pod, named like the sandbox."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "alice", "labels": labels},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/theirs:1",
                    "securityContext": {
                        "runAsUser": 4242,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def foreign_secret(labels: dict[str, str]) -> dict[str, Any]:
    """Someone's own Secret, named like the sandbox's credentials."""
    theirs = base64.b64encode(b"theirs").decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "alice-credentials", "labels": labels},
        "data": {"ONYX_PAT": theirs},
    }


def foreign_pvc(labels: dict[str, str]) -> dict[str, Any]:
    """Someone's own claim, named like a Job-mode sandbox's library volume."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "alice-library", "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


CLASHES = [
    pytest.param(PODS, foreign_pod, {}, "PodReady", "PodNameTaken", {}, id="pod"),
    pytest.param(
        SECRETS, foreign_secret, {}, "CredentialsReady", "SecretNameTaken", {}, id="secret"
    ),
    pytest.param(
        SECRETS,
        foreign_secret,
        COPIED_LABELS,
        "CredentialsReady",
        "SecretNameTaken",
        {},
        id="secret-with-copied-labels",
    ),
    pytest.param(
        PVCS,
        foreign_pvc,
        {},
        "UserLibrarySynced",
        "VolumeNameTaken",
        {"userLibrary": {"mode": "Job", "size": "1Gi"}},
        id="job-mode-volume",
    ),
    pytest.param(
        PVCS,
        foreign_pvc,
        COPIED_LABELS,
        "UserLibrarySynced",
        "VolumeNameTaken",
        {"userLibrary": {"mode": "Job", "size": "1Gi"}},
        id="job-mode-volume-with-copied-labels",
    ),
]


def identity(obj: dict[str, Any] | None) -> tuple[Any, ...]:
    """What the operator must not change about someone else's object (a pod's status moves
    on with the scheduler and kubelet, so not its resourceVersion)."""
    assert obj is not None, "the foreign object was deleted"
    meta = obj["metadata"]
    containers = obj.get("spec", {}).get("containers")
    return (
        meta["uid"],
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("ownerReferences"),
        obj.get("data"),
        containers,
    )


@pytest.mark.parametrize(("kind", "make", "labels", "condition", "reason", "spec"), CLASHES)
def test_a_foreign_object_with_a_childs_name_survives_the_sandbox_and_is_reported(
    cluster: Cluster,
    namespace: str,
    operator: OperatorProcess,
    state: Path,
    kind: str,
    make: Any,
    labels: dict[str, str],
    condition: str,
    reason: str,
    spec: dict[str, Any],
) -> None:
    theirs = cluster.create(kind, namespace, make(labels))
    before = identity(theirs)

    cluster.create(SANDBOXES, namespace, sandbox("alice", **spec))

    clash = until(
        lambda: (
            (found := cluster.condition(namespace, "alice", condition)).get("reason") == reason
            and found
        ),
        operator,
        f"{condition} {reason}",
        show=lambda: cluster.sandbox(namespace, "alice"),
    )
    assert "not managed by this CraftSandbox" in clash["message"]
    assert clash["status"] == "False"
    cluster.reasons_once_said(namespace, "alice", reason)
    assert identity(cluster.get(kind, namespace, theirs["metadata"]["name"])) == before

    cluster.delete(SANDBOXES, namespace, "alice")

    until(lambda: cluster.sandbox(namespace, "alice") is None, operator, "the sandbox gone")
    # Still there after the finalizer ran and the garbage collector had its chance.
    wait_for(lambda: all(pats(state).values()), what="every PAT minted for it revoked")
    assert identity(cluster.get(kind, namespace, theirs["metadata"]["name"])) == before
    assert "Traceback" not in operator.log_tail(lines=10_000)

"""The workspace at its edges on the real API server: ``retain`` set on a sandbox the policy
withdrew, the sandbox's own PVC deleted while its pod mounts it, and a retained workspace
said once when its sandbox goes."""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_lifecycle import SANDBOXES, pod, ready, reasons, sandbox, status, until
from tests.support.cluster import CRAFT, Cluster, wait_for
from tests.support.operator_process import OperatorProcess
from tests.support.volumes import reserved_volume

pytestmark = pytest.mark.cluster

PVCS = "/api/v1/persistentvolumeclaims"
POLICIES = f"{CRAFT}/craftsandboxpolicies"
TOLERATIONS = [{"key": "dedicated", "operator": "Exists"}]


def test_retain_set_on_a_sandbox_the_policy_withdrew_takes_the_owner_reference_off(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """No step runs for a withdrawn sandbox, but its workspace is the user's: ``retain``
    must still free it before a foreground deletion (Argo CD's prune) lets the garbage
    collector take it with the sandbox."""
    policy = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPolicy",
        "metadata": {"name": "default"},
        "spec": {"tolerations": TOLERATIONS},
    }
    cluster.create(POLICIES, None, policy)
    try:
        with reserved_volume(cluster, namespace, "alice-workspace"):
            cluster.create(
                SANDBOXES,
                namespace,
                sandbox("alice", tolerations=TOLERATIONS, workspace={"size": "1Gi"}),
            )
            ready(cluster, namespace, "alice", operator)
            cluster.patch(POLICIES, None, "default", {"spec": {"tolerations": None}})
            until(lambda: pod(cluster, namespace, "alice") is None, operator, "withdrawn")

            cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"workspace": {"retain": True}}})

            wait_for(
                lambda: (
                    not (cluster.get(PVCS, namespace, "alice-workspace") or {})
                    .get("metadata", {})
                    .get("ownerReferences")
                ),
                within=30,
                what="the workspace freed of its owner",
            )
            wait_for(
                lambda: (status(cluster, namespace, "alice").get("workspace") or {}).get("retain"),
                within=30,
                what="status.workspace.retain",
            )
    finally:
        cluster.delete(POLICIES, None, "default")


@pytest.mark.parametrize("retain", [False, True])
def test_the_sandboxs_own_pvc_deleted_while_mounted_keeps_it_ready_and_says_so(
    cluster: Cluster, namespace: str, operator: OperatorProcess, retain: bool
) -> None:
    """pvc-protection keeps the PVC Terminating while the pod runs: the sandbox works on
    (with ``retain`` too: it is no earlier sandbox's PVC), and no resize is said refused."""
    with reserved_volume(cluster, namespace, "alice-workspace"):
        cluster.create(
            SANDBOXES, namespace, sandbox("alice", workspace={"size": "1Gi", "retain": retain})
        )
        ready(cluster, namespace, "alice", operator)
        cluster.delete(PVCS, namespace, "alice-workspace")
        wait_for(
            lambda: "WorkspaceDeleting" in reasons(cluster, namespace, "alice"),
            within=30,
            what="WorkspaceDeleting",
        )
        time.sleep(3)  # passes enough for a drop out of Ready
        pvc = cluster.get(PVCS, namespace, "alice-workspace")
        assert pvc is not None
        assert pvc["metadata"].get("deletionTimestamp")
        assert pod(cluster, namespace, "alice") is not None
        assert status(cluster, namespace, "alice").get("phase") == "Ready"
        assert "WorkspaceResizeRefused" not in reasons(cluster, namespace, "alice")


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_a_retained_workspace_is_said_once_when_its_sandbox_goes(
    cluster: Cluster, namespace: str, operator: OperatorProcess, propagation: str
) -> None:
    with reserved_volume(cluster, namespace, "alice-workspace"):
        cluster.create(
            SANDBOXES, namespace, sandbox("alice", workspace={"size": "1Gi", "retain": True})
        )
        ready(cluster, namespace, "alice", operator)
        cluster.call(
            "DELETE",
            f"{CRAFT}/namespaces/{namespace}/craftsandboxes/alice",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
        )
        until(lambda: cluster.sandbox(namespace, "alice") is None, operator, "alice gone")
        time.sleep(3)  # a later pass on a stale copy of the sandbox, if any, has run
        said = reasons(cluster, namespace, "alice")
        assert said.count("WorkspaceRetained") == 1, said

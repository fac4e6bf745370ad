"""A CraftSandbox on a real API server: admitted, provisioned, validated through real exec."""

from __future__ import annotations

import base64

from tests.support.cluster import CRAFT, Cluster, names, wait_for
from tests.support.operator_process import OperatorProcess

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def sandbox(name: str, **spec: object) -> dict[str, object]:
    """A CraftSandbox for USER_ID."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name},
        "spec": {"user": {"id": USER_ID}, **spec},
    }


def phase(cluster: Cluster, namespace: str, name: str) -> str:
    """The sandbox's phase ("" before the first status)."""
    return str(((cluster.sandbox(namespace, name) or {}).get("status") or {}).get("phase", ""))


def test_a_sandbox_becomes_ready_with_onyx_cli_validated_through_the_real_exec_path(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("alice"))

    wait_for(
        lambda: phase(cluster, namespace, "alice") == "Ready",
        within=90,
        what=lambda: (
            f"alice Ready; its status: {cluster.sandbox(namespace, 'alice')}; "
            f"operator log:\n{operator.log_tail()}"
        ),
    )
    validated = cluster.condition(namespace, "alice", "CLIValidated")
    assert validated["status"] == "True", validated
    created = cluster.sandbox(namespace, "alice")
    assert created is not None
    uid = created["metadata"]["uid"]
    # Kept by the installed CRD (not pruned): which token the pod holds, not only its id.
    status = created["status"]
    assert status["validatedPatDisplay"] == status["credentials"]["tokenDisplay"], status
    for kind, child in (
        ("/api/v1/pods", "alice"),
        ("/api/v1/secrets", "alice-credentials"),
        ("/api/v1/configmaps", "alice-skills"),
    ):
        obj = cluster.get(kind, namespace, child)
        assert obj is not None, child
        assert [owner["uid"] for owner in obj["metadata"]["ownerReferences"]] == [uid]
    secret = cluster.get("/api/v1/secrets", namespace, "alice-credentials")
    assert secret is not None
    token = base64.b64decode(secret["data"]["ONYX_PAT"]).decode()
    assert token.startswith("onyx_pat_")
    pod = cluster.get("/api/v1/pods", namespace, "alice")
    assert token not in str(pod)
    assert names(cluster.list("/api/v1/pods", namespace)) == ["alice"]

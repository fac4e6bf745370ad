"""Least privilege, judged by the real authorizer.

Every test of this tier runs the operator as the ``craft-operator`` ServiceAccount with the
RBAC of ``manifests/base`` and fails when any of its requests was refused. This module
shows the other side: a rule taken out of that ClusterRole is refused by the API server,
and the operator says so in the sandbox's status instead of failing silently.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Launch
from tests.cluster.test_provisioning import sandbox
from tests.support.cluster import CRAFT, Cluster, audited_requests, wait_for
from tests.support.rbac import cluster_role_rules

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def without_rule(resource: str) -> list[dict[str, Any]]:
    """The ClusterRole's rules of ``manifests/base`` less the one for ``resource``."""
    rules = [copy.deepcopy(dict(rule)) for rule in cluster_role_rules()]
    kept = [rule for rule in rules if resource not in rule["resources"]]
    assert len(kept) == len(rules) - 1, f"no single rule for {resource}"
    return kept


def reduced_account(cluster: Cluster, rules: list[dict[str, Any]]) -> tuple[str, str]:
    """A ServiceAccount in craft-system bound to a ClusterRole of ``rules``; its name."""
    name = f"craft-operator-less-{uuid.uuid4().hex[:6]}"
    meta = {"name": name}
    cluster.create(
        "/api/v1/serviceaccounts",
        "craft-system",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
    )
    cluster.create(
        f"{RBAC}/clusterroles",
        None,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": rules},
    )  # fmt: skip
    cluster.create(
        f"{RBAC}/clusterrolebindings",
        None,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "craft-system"}],
        },
    )
    return "craft-system", name


@pytest.fixture
def operator_without_exec(cluster: Cluster, launch: Launch, state: Path) -> str:
    """An operator whose ClusterRole lacks ``pods/exec``; the ServiceAccount's user name."""
    account = reduced_account(cluster, without_rule("pods/exec"))
    process = launch()
    process.kubeconfig_path = cluster.service_account_kubeconfig(
        state / "reduced.kubeconfig", account
    )
    process.start()
    return f"system:serviceaccount:{account[0]}:{account[1]}"


def test_without_pods_exec_the_real_authorizer_refuses_validation_and_the_status_says_so(
    cluster: Cluster, namespace: str, operator_without_exec: str
) -> None:
    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("alice"))

    validated = wait_for(
        lambda: (
            cluster.condition(namespace, "alice", "CLIValidated").get("reason") == "ExecFailed"
            and cluster.condition(namespace, "alice", "CLIValidated")
        ),
        within=60,
        what=lambda: f"CLIValidated to fail; status: {cluster.sandbox(namespace, 'alice')}",
    )
    assert validated["status"] == "Unknown"
    assert "not allowed to exec into pod" in validated["message"]
    assert "pods/exec" in validated["message"]
    assert cluster.condition(namespace, "alice", "Ready")["status"] != "True"
    # The pod itself was created: only the missing rule is refused.
    assert cluster.get("/api/v1/pods", namespace, "alice") is not None
    refused = [
        event
        for event in audited_requests(cluster.plane, operator_without_exec)
        if event["annotations"].get("authorization.k8s.io/decision") == "forbid"
    ]
    assert refused, "the API server never refused the reduced operator"
    assert {event["objectRef"].get("subresource") for event in refused} == {"exec"}
    assert json.dumps(refused).count(namespace) >= len(refused)

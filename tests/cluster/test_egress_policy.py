"""Network policy is part of the product, on a real API server: no sandbox pod starts in a
namespace where no NetworkPolicy restricts its egress, and it starts once one does."""

from __future__ import annotations

import pytest

from tests.cluster.test_lifecycle import PODS, SANDBOXES, ready, sandbox, until
from tests.support.cluster import REPO, Cluster
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

POLICIES = "/apis/networking.k8s.io/v1/networkpolicies"


def test_a_sandbox_waits_for_a_policy_restricting_its_egress_and_starts_once_one_exists(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.delete(POLICIES, namespace, "craft-sandbox-egress")
    cluster.create(SANDBOXES, namespace, sandbox("alice"))

    refused = until(
        lambda: (
            (found := cluster.condition(namespace, "alice", "PodReady")).get("reason")
            == "EgressNotRestricted"
            and found
        ),
        operator,
        "PodReady EgressNotRestricted",
    )
    assert refused["status"] == "False"
    assert cluster.get(PODS, namespace, "alice") is None
    cluster.reasons_once_said(namespace, "alice", "EgressNotRestricted")

    cluster.kubectl("apply", "-n", namespace, "-k", str(REPO / "manifests" / "sandbox-namespace"))

    assert ready(cluster, namespace, "alice", operator)["phase"] == "Ready"

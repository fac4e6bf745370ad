"""Input the real API server admits but no pod can carry is explained, not retried forever."""

from __future__ import annotations

import time

from tests.cluster.test_provisioning import sandbox
from tests.support.cluster import CRAFT, Cluster, audited_requests, wait_for
from tests.support.operator_process import OperatorProcess


def test_an_overflowing_resource_quantity_is_invalid_resources_and_the_operator_rests(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    # The CRD's quantity pattern (Kubernetes' own) admits it; its value overflows.
    spec = {"resources": {"requests": {"cpu": "1e999999999"}}}
    cluster.create(f"{CRAFT}/craftsandboxes", namespace, sandbox("greedy", **spec))

    wait_for(
        lambda: (
            cluster.condition(namespace, "greedy", "PodReady").get("reason") == "InvalidResources"
        ),
        within=60,
        what=lambda: f"InvalidResources; status: {cluster.sandbox(namespace, 'greedy')}",
    )
    condition = cluster.condition(namespace, "greedy", "PodReady")
    assert condition["status"] == "False"
    assert "resources.requests.cpu" in condition["message"]
    assert "larger than Kubernetes allows" in condition["message"]
    status = (cluster.sandbox(namespace, "greedy") or {})["status"]
    assert status["phase"] == "Failed"
    cluster.reasons_once_said(namespace, "greedy", "InvalidResources")
    assert cluster.get("/api/v1/pods", namespace, "greedy") is None

    # Settled: no retries, no tracebacks.
    before = len(audited_requests(cluster.plane))
    time.sleep(10)
    assert len(audited_requests(cluster.plane)) - before <= 3
    log = "\n".join(path.read_text() for path in operator.logs)
    assert "Traceback" not in log
    assert "failed unexpectedly" not in log

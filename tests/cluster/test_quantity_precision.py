"""Kubernetes reads a quantity to the nano, a finer one rounded up (``resource.ParseQuantity``
and CEL's ``quantity()``): ``0.9999999999999999`` is 1. What the CRD admits and the pod API
takes as a limit equal to its request, or a size of a whole byte, the operator takes so too.
"""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.api.models import CraftSandbox
from tests.cluster.test_provisioning import phase, sandbox
from tests.support.cluster import CRAFT, ApiError, Cluster, wait_for
from tests.support.crd_validation import validate_create
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

SANDBOXES = f"{CRAFT}/craftsandboxes"
#: What a backend computing a limit with floats writes: 0.7 + 0.2 + 0.1.
FLOAT_ONE = str(0.7 + 0.2 + 0.1)

#: Specs whose quantities differ only below the nano, and whether the API server admits them.
FINE_SPECS: list[tuple[str, dict[str, Any], bool]] = [
    ("limit-equal", {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": FLOAT_ONE}}}, True),
    (
        "device-equal",
        {"resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": FLOAT_ONE}}},
        True,
    ),
    (
        "limit-below",
        {"resources": {"requests": {"cpu": "1.0000000001"}, "limits": {"cpu": "1"}}},
        False,
    ),
    ("workspace-one-byte", {"workspace": {"size": "0.9999999999"}}, True),
    ("library-one-byte", {"userLibrary": {"mode": "Job", "size": "0.9999999999"}}, True),
    ("workspace-one-nano", {"workspace": {"size": "1n"}}, False),
]


@pytest.mark.parametrize(
    ("spec", "admitted"),
    [(spec, admitted) for _, spec, admitted in FINE_SPECS],
    ids=[case for case, _, _ in FINE_SPECS],
)
def test_the_api_server_the_offline_emulator_and_the_model_read_quantities_to_the_nano(
    cluster: Cluster, namespace: str, spec: dict[str, Any], admitted: bool
) -> None:
    manifest = sandbox("fine", **spec)
    if admitted:
        cluster.create(SANDBOXES, namespace, manifest, dry_run=True)
    else:
        with pytest.raises(ApiError):
            cluster.create(SANDBOXES, namespace, manifest, dry_run=True)
    assert (validate_create(manifest) == []) is admitted
    if admitted:
        CraftSandbox.model_validate(manifest)


def test_a_limit_kubernetes_reads_as_its_request_makes_a_ready_sandbox(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    resources = {"requests": {"cpu": "1"}, "limits": {"cpu": FLOAT_ONE}}
    cluster.create(SANDBOXES, namespace, sandbox("alice", resources=resources))

    wait_for(
        lambda: phase(cluster, namespace, "alice") in ("Ready", "Failed"),
        within=90,
        what=lambda: f"alice settled; status: {cluster.sandbox(namespace, 'alice')}",
    )
    assert phase(cluster, namespace, "alice") == "Ready", cluster.sandbox(namespace, "alice")


#: Quantities of resources the pod API counts whole (devices, huge pages), each in a pod's
#: limits beside memory (huge pages need it).
WHOLE_COUNTS: list[dict[str, Any]] = [
    {"nvidia.com/gpu": "0.5"},
    {"nvidia.com/gpu": "1.0000000001"},
    {"nvidia.com/gpu": "1.0"},
    {"nvidia.com/gpu": "1000m"},
    {"nvidia.com/gpu": "3.00000"},
    {"nvidia.com/gpu": "0.9999999999"},
    {"hugepages-2Mi": "3Mi"},
    {"hugepages-2Mi": 4194305},
    {"hugepages-1.5": 3},
    {"hugepages-0": "0"},
    {"hugepages-2Mi": "4Mi"},
    {"hugepages-2Mi": "0"},
    {"hugepages-2Mi": "2097151.5"},
    {"hugepages-1Gi": "2048Mi"},
]


@pytest.mark.parametrize("limits", WHOLE_COUNTS, ids=lambda limits: str(limits))
def test_the_crd_refuses_a_device_or_huge_page_count_exactly_when_the_pod_api_does(
    cluster: Cluster, namespace: str, limits: dict[str, Any]
) -> None:
    limits = {**limits, "memory": "1Gi"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "counted"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]
        },
    }
    pod_valid = True
    try:
        cluster.create("/api/v1/pods", namespace, pod, dry_run=True)
    except ApiError as error:  # the namespace's Pod Security refuses it after validation
        pod_valid = error.status != 422
    manifest = sandbox("counted", resources={"limits": limits})
    try:
        cluster.create(SANDBOXES, namespace, manifest, dry_run=True)
        admitted = True
    except ApiError:
        admitted = False
    assert admitted is pod_valid
    assert (validate_create(manifest) == []) is pod_valid

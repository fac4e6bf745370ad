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

"""Quantities that would hold the API server's CPU are refused at admission, at once.

Kubernetes' own quantity parser takes about a minute for ``1e-99999999`` and comparing
``1e99999999`` takes as long (it computes the power of ten). Every CEL rule of the CRDs
tries the quantity pattern (at most three exponent digits) before ``isQuantity`` or
``quantity()``, so such a value is refused by the pattern without reaching the parser: each
request below is answered within the client's 10 s timeout, not after minutes.
"""

from __future__ import annotations

import pytest

from tests.cluster.test_provisioning import sandbox
from tests.support.cluster import CRAFT, ApiError, Cluster

pytestmark = pytest.mark.cluster

SANDBOXES = f"{CRAFT}/craftsandboxes"
#: Far past what the parser or a comparison can work out in any reasonable time.
HUGE_EXPONENTS = ("1e999999999", "1e-999999999", "1E+999999999", "5e-999999999")


def refused(cluster: Cluster, call: object) -> ApiError:
    assert callable(call)
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.status == 422, caught.value
    return caught.value


@pytest.mark.parametrize("value", HUGE_EXPONENTS)
def test_a_resource_quantity_with_a_huge_exponent_is_refused_at_once(
    cluster: Cluster, namespace: str, value: str
) -> None:
    spec = {"resources": {"requests": {"cpu": value}, "limits": {"memory": value}}}
    error = refused(
        cluster, lambda: cluster.create(SANDBOXES, namespace, sandbox("greedy", **spec))
    )
    assert "must be a Kubernetes quantity" in error.message


def test_a_workspace_resized_to_a_huge_exponent_is_refused_at_once(
    cluster: Cluster, namespace: str
) -> None:
    cluster.create(SANDBOXES, namespace, sandbox("holder", workspace={"size": "1Gi"}))
    for value in HUGE_EXPONENTS:
        error = refused(
            cluster,
            lambda value=value: cluster.patch(
                SANDBOXES, namespace, "holder", {"spec": {"workspace": {"size": value}}}
            ),
        )
        assert "must be a Kubernetes quantity" in error.message
    stored = cluster.sandbox(namespace, "holder") or {}
    assert stored["spec"]["workspace"]["size"] == "1Gi"

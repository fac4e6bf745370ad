"""A pool pod's shape as the real API server stores it: the pod the operator builds keeps
the shape it was built with, whatever the server fills in as defaults (else no pool pod
would ever be claimed), and one made otherwise does not (so it is never claimed).

Dry-run creates: the server decodes, defaults, validates and admits each pod (Pod Security
``restricted`` included) and answers the pod as it would store it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.pool import parse_pool
from craft_operator.builders.pool import build_pool_pod
from craft_operator.builders.quantities import canonical_resources
from craft_operator.config import Settings
from craft_operator.kube.cache import compact_pod
from craft_operator.kube.pod_shape import SHAPE, first_difference, shape_of
from tests.support.cluster import Cluster
from tests.unit.builders.test_quantities import BY_VALUE, CANONICAL_STORED

PODS = "/api/v1/pods"


def built_pool_pod(namespace: str, tmp_path: Path, **spec: Any) -> dict[str, Any]:
    pool = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": "warm", "namespace": namespace, "uid": "u-1"},
        "spec": {"replicas": 1, **spec},
    }
    settings = Settings(state_dir=tmp_path / "state", server_url="http://onyx.invalid:8080")
    pod = build_pool_pod(parse_pool(pool), settings)
    pod["metadata"]["ownerReferences"] = []  # no such pool here: the server would refuse it
    return pod


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="defaults"),
        pytest.param(
            {
                "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
                "nodeSelector": {"workload": "sandboxes"},
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            },
            id="scheduling-and-resources",
        ),
    ],
)
def test_the_pod_the_operator_builds_keeps_its_shape_as_the_api_server_stores_it(
    cluster: Cluster, namespace: str, tmp_path: Path, spec: dict[str, Any]
) -> None:
    built = built_pool_pod(namespace, tmp_path, **spec)
    stored = cluster.create(PODS, namespace, copy.deepcopy(built), dry_run=True)
    assert stored["spec"]["dnsPolicy"] == "ClusterFirst", "the server filled in its defaults"
    assert stored["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    cached = compact_pod(stored)["spec"][SHAPE]
    assert first_difference(cached, shape_of(built["spec"])) is None


def test_a_pod_made_with_another_command_or_a_container_beside_it_differs(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    built = built_pool_pod(namespace, tmp_path)
    other_command = copy.deepcopy(built)
    other_command["spec"]["containers"][0]["command"] = ["sh", "-c", "cat /run/onyx/pat"]
    beside = copy.deepcopy(built)
    watcher = copy.deepcopy(beside["spec"]["containers"][0])
    watcher.update(name="watcher", volumeMounts=[{"name": "onyx-credentials", "mountPath": "/t"}])
    beside["spec"]["containers"].append(watcher)

    found = [
        first_difference(
            compact_pod(cluster.create(PODS, namespace, pod, dry_run=True))["spec"][SHAPE],
            shape_of(built["spec"]),
        )
        for pod in (other_command, beside)
    ]

    assert found == ["spec.containers[sandbox].command", "spec.containers"]


def test_a_pod_with_a_host_file_where_the_token_goes_differs(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    built = built_pool_pod(namespace, tmp_path)
    forged = copy.deepcopy(built)
    forged["spec"]["containers"][0]["terminationMessagePath"] = "/run/onyx/pat.12"
    stored = cluster.create(PODS, namespace, forged, dry_run=True)
    where = first_difference(compact_pod(stored)["spec"][SHAPE], shape_of(built["spec"]))
    assert where == "spec.containers[sandbox].terminationMessagePath"


def test_the_canonical_quantities_are_the_ones_the_api_server_stores(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A pool and a sandbox that write a quantity differently must hash the same pod: the
    operator's canonical form is the API server's."""
    built = built_pool_pod(namespace, tmp_path)
    for resource in ("cpu", "memory"):
        stored = {}
        for text in CANONICAL_STORED:
            pod = copy.deepcopy(built)
            pod["spec"]["containers"][0]["resources"] = {"requests": {resource: text}}
            answer = cluster.create(PODS, namespace, pod, dry_run=True)
            stored[text] = answer["spec"]["containers"][0]["resources"]["requests"][resource]

        assert stored == CANONICAL_STORED, resource
        ours = {t: canonical_resources({"r": {resource: t}})["r"][resource] for t in stored}
        assert ours == stored, resource

    # The forms by value (pool pods are built with them) are stored as they are written.
    for form in BY_VALUE:
        pod = copy.deepcopy(built)
        pod["spec"]["containers"][0]["resources"] = {"requests": {"memory": form}}
        answer = cluster.create(PODS, namespace, pod, dry_run=True)
        assert answer["spec"]["containers"][0]["resources"]["requests"]["memory"] == form

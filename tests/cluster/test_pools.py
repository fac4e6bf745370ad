"""A CraftSandboxPool on the real control plane (kwok runs its pods): it fills, it replaces
its unclaimed pods on an image change and leaves a claimed one alone, and deleting it
deletes its unclaimed pods only (the garbage collector and the operator), never a claimed
one. The claim here is the test's stand-in for the sandbox's: the same labels and owner
move, as one write."""

from __future__ import annotations

from typing import Any

from tests.support.cluster import CRAFT, Cluster, platform_allowing, wait_for
from tests.support.operator_process import OperatorProcess

POOLS = f"{CRAFT}/craftsandboxpools"
PODS = "/api/v1/pods"
POOL_LABEL = "craft.onyx.app/pool"


def pool_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The pool's unclaimed pods that are not being deleted."""
    return [
        pod
        for pod in cluster.list(PODS, namespace, selector=f"{POOL_LABEL}=warm")
        if not pod["metadata"].get("deletionTimestamp")
    ]


def pool_status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return dict((cluster.get(POOLS, namespace, "warm") or {}).get("status") or {})


def full(cluster: Cluster, namespace: str, image: str) -> bool:
    """Three Ready pods, all with ``image``, and the status says so."""
    pods = pool_pods(cluster, namespace)
    status = pool_status(cluster, namespace)
    return (
        len(pods) == 3
        and {pod["spec"]["containers"][0]["image"] for pod in pods} == {image}
        and status.get("ready") == 3
        and status.get("creating") == 0
    )


def claim(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """Take ``pod`` out of the pool: a ConfigMap stands in for the claiming sandbox."""
    holder = cluster.create(
        "/api/v1/configmaps", namespace, {"metadata": {"name": "claim-holder"}, "data": {}}
    )
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "claim-holder",
        "uid": holder["metadata"]["uid"],
        "controller": True,
    }
    return cluster.patch(
        PODS,
        namespace,
        pod["metadata"]["name"],
        {
            "metadata": {
                "resourceVersion": pod["metadata"]["resourceVersion"],
                "labels": {POOL_LABEL: None, "craft.onyx.app/claimed-from": "warm"},
                "ownerReferences": [owner],
            }
        },
    )


def test_a_pool_fills_updates_around_a_claimed_pod_and_leaves_it_when_deleted(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    def described(what: str) -> Any:
        return lambda: (
            f"{what}; status {pool_status(cluster, namespace)}; pods "
            f"{[p['metadata']['name'] for p in pool_pods(cluster, namespace)]}; "
            f"operator log:\n{operator.log_tail()}"
        )

    cluster.create(
        POOLS,
        namespace,
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandboxPool",
            "metadata": {"name": "warm"},
            "spec": {"replicas": 3, "image": "craft-sandbox:0.1.0"},
        },
    )
    wait_for(
        lambda: full(cluster, namespace, "craft-sandbox:0.1.0"),
        within=90,
        what=described("3 ready"),
    )
    ready = [c for c in pool_status(cluster, namespace)["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True", ready

    claimed = claim(cluster, namespace, pool_pods(cluster, namespace)[0])
    name = claimed["metadata"]["name"]
    wait_for(
        lambda: (
            full(cluster, namespace, "craft-sandbox:0.1.0")
            # Taken by a ConfigMap, not a sandbox: not counted as claimed (a label and an
            # owner are anyone's to write; test_pool_claims counts real claims).
            and pool_status(cluster, namespace).get("claimed") == 0
        ),
        within=90,
        what=described("the claimed pod replaced"),
    )

    with platform_allowing(cluster, images=["craft-sandbox"]):  # the new image, allowed
        cluster.patch(POOLS, namespace, "warm", {"spec": {"image": "craft-sandbox:0.2.0"}})
        wait_for(
            lambda: full(cluster, namespace, "craft-sandbox:0.2.0"),
            within=120,
            what=described("all replaced"),
        )
    kept = cluster.get(PODS, namespace, name)
    assert kept is not None, "the claimed pod was deleted"
    assert kept["metadata"]["uid"] == claimed["metadata"]["uid"]
    assert kept["spec"]["containers"][0]["image"] == "craft-sandbox:0.1.0"

    cluster.delete(POOLS, namespace, "warm")
    wait_for(lambda: pool_pods(cluster, namespace) == [], within=90, what=described("pods gone"))
    kept = cluster.get(PODS, namespace, name)
    assert kept is not None, "deleting the pool deleted a claimed pod"
    assert not kept["metadata"].get("deletionTimestamp")


def test_a_pool_without_replicas_is_scaled_by_kubectl_and_an_autoscaler_can_read_it(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """The scale subresource: kubectl scale sets the replicas a manifest left out, and its
    selector is the pool's unclaimed pods, which the real HorizontalPodAutoscaler
    controller requires before it looks at any metric."""
    cluster.create(
        POOLS,
        namespace,
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandboxPool",
            "metadata": {"name": "auto"},
            "spec": {},
        },
    )
    assert (cluster.get(POOLS, namespace, "auto") or {})["spec"]["replicas"] == 1

    def ready_pods() -> list[dict[str, Any]]:
        return cluster.list(PODS, namespace, selector=f"{POOL_LABEL}=auto")

    wait_for(lambda: len(ready_pods()) == 1, within=90, what="the defaulted replica")
    cluster.kubectl("scale", "-n", namespace, "csbpool/auto", "--replicas=2")
    wait_for(
        lambda: (
            (cluster.get(POOLS, namespace, "auto/scale") or {}).get("status", {})
            == {"replicas": 2, "selector": f"{POOL_LABEL}=auto"}
        ),
        within=90,
        what="the scale subresource saying 2 pods and their selector",
    )
    assert len(ready_pods()) == 2

    cluster.create(
        "/apis/autoscaling/v2/horizontalpodautoscalers",
        namespace,
        {
            "metadata": {"name": "auto"},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "craft.onyx.app/v1alpha1",
                    "kind": "CraftSandboxPool",
                    "name": "auto",
                },
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ],
            },
        },
    )

    def scaling_active() -> dict[str, Any] | None:
        hpa = cluster.get("/apis/autoscaling/v2/horizontalpodautoscalers", namespace, "auto")
        for condition in ((hpa or {}).get("status") or {}).get("conditions") or []:
            if condition["type"] == "ScalingActive":
                return dict(condition)
        return None

    wait_for(lambda: scaling_active() is not None, within=60, what="the HPA's verdict")
    verdict = scaling_active()
    assert verdict is not None
    # No metrics server here: the controller got past the selector to the metrics.
    assert verdict["reason"] not in ("InvalidSelector", "SelectorRequired"), verdict

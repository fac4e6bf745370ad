"""Claiming warm pool pods on the real control plane (kwok pods, the real exec path).

A sandbox naming a pool becomes Ready on that very pool pod, with its token, SKILL.md and
library delivered into it and onyx-cli validated; the claimed pod is the sandbox's (its
labels, the egress-proxy ones included; its owner), nothing of the pool's; the pool
refills. A resumed sandbox claims again; a pool update replaces only its unclaimed pods.
A claimed pod that left the watches' sight (its managed-by label removed) is kept, not doubled.
Sandboxes claiming at once never share a pod, and those left without one start cold and
say so in a ColdStart event.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.cluster.test_user_library import REVISION, exec_in_pod, library_in_pod, upload
from tests.support.cluster import CRAFT, Cluster, audited_requests, platform_allowing, wait_for
from tests.support.events import step_messages, step_reasons
from tests.support.operator_process import OperatorProcess

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
SANDBOXES = f"{CRAFT}/craftsandboxes"
POOLS = f"{CRAFT}/craftsandboxpools"
PODS = "/api/v1/pods"
POOL_LABEL = "craft.onyx.app/pool"
MANAGED_BY = "app.kubernetes.io/managed-by"
CLAIMED_FROM = "craft.onyx.app/claimed-from"
#: The sandbox's labels a claim puts on the pod, the egress proxy's two included.
SANDBOX_LABELS = (
    "craft.onyx.app/sandbox",
    "craft.onyx.app/user-id",
    "onyx.app/sandbox-id",
    "onyx.app/tenant-id",
)


def a_pool(cluster: Cluster, namespace: str, replicas: int, **spec: Any) -> None:
    cluster.create(
        POOLS,
        namespace,
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandboxPool",
            "metadata": {"name": "warm"},
            "spec": {"replicas": replicas, **spec},
        },
    )


def pool_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The pool's unclaimed pods that are not being deleted."""
    return [
        pod
        for pod in cluster.list(PODS, namespace, selector=f"{POOL_LABEL}=warm")
        if not pod["metadata"].get("deletionTimestamp")
    ]


def going(cluster: Cluster, namespace: str, name: str) -> bool:
    """Whether the pod ``name`` is gone or being deleted."""
    return all(
        pod["metadata"]["name"] != name or pod["metadata"].get("deletionTimestamp")
        for pod in cluster.list(PODS, namespace)
    )


def pool_full(cluster: Cluster, namespace: str, replicas: int, image: str | None = None) -> bool:
    """``replicas`` unclaimed pods, all Ready (and of ``image``), and the status says so."""
    pods = pool_pods(cluster, namespace)
    status = (cluster.get(POOLS, namespace, "warm") or {}).get("status") or {}
    images = {pod["spec"]["containers"][0]["image"] for pod in pods}
    return (
        len(pods) == replicas
        and status.get("ready") == replicas
        and status.get("creating") == 0
        and (image is None or images == {image})
    )


def refilled_with_one_claimed(cluster: Cluster, namespace: str) -> bool:
    """The pool of two full again, and its status counting one pod claimed from it."""
    status = (cluster.get(POOLS, namespace, "warm") or {}).get("status") or {}
    return pool_full(cluster, namespace, 2) and status.get("claimed") == 1


def sandbox(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": name, "annotations": {REVISION: "1"}},
        "spec": {"user": {"id": USER_ID}, **spec},
    }


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict((cluster.sandbox(namespace, name) or {}).get("status") or {})


def until(
    cluster: Cluster,
    namespace: str,
    operator: OperatorProcess,
    check: Any,
    what: str | Callable[[], str],
) -> Any:
    return wait_for(
        check,
        within=90,
        what=lambda: (
            f"{what() if callable(what) else what}; pool {cluster.get(POOLS, namespace, 'warm')}; "
            f"operator log:\n{operator.log_tail()}"
        ),
    )


def ready_on(cluster: Cluster, namespace: str, name: str, operator: OperatorProcess) -> Any:
    """The sandbox's status once it is Ready, and its pod."""
    current = until(
        cluster,
        namespace,
        operator,
        lambda: (s := status(cluster, namespace, name)).get("phase") == "Ready" and s,
        lambda: (
            f"{name} Ready; its status {status(cluster, namespace, name)}; its events "
            f"{[(e.get('reason'), e.get('message')) for e in cluster.events(namespace, name)]}"
        ),
    )
    pod = cluster.get(PODS, namespace, current["podName"])
    assert pod is not None
    return current, pod


def reasons(cluster: Cluster, namespace: str, name: str) -> list[str]:
    """The reasons of the steps the events about ``name`` said (each step of a pass's
    coalesced Normal event)."""
    return step_reasons(cluster.events(namespace, name))


def operator_writes(cluster: Cluster, since: int) -> list[str]:
    """The operator's writes after its ``since`` first audited requests, as ``verb
    resource[/subresource]``, events apart (``verb events``)."""
    found = []
    for event in audited_requests(cluster.plane)[since:]:
        if event["verb"] in ("get", "list", "watch"):
            continue
        ref = event.get("objectRef", {})
        if ref.get("subresource") == "exec":
            continue
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        found.append(f"{event['verb']} {ref.get('resource')}{sub}")
    return sorted(found)


def test_a_claim_takes_six_writes_and_one_event(
    cluster: Cluster, namespace: str, operator: OperatorProcess, s3: Any, bucket: str
) -> None:
    files = {f"notes/file-{index}.md": f"note {index}\n".encode() for index in range(10)}
    upload(s3, bucket, files)
    a_pool(cluster, namespace, 2)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "pool full")
    before = len(audited_requests(cluster.plane))

    cluster.create(SANDBOXES, namespace, sandbox("alice", poolRef={"name": "warm"}))
    ready_on(cluster, namespace, "alice", operator)
    # The refill, Ready, and the pool's status saying so (written once per 5 s at most).
    until(
        cluster,
        namespace,
        operator,
        lambda: refilled_with_one_claimed(cluster, namespace),
        "refilled, and the status counting the claimed pod",
    )

    writes = operator_writes(cluster, before)
    others = [write for write in writes if not write.endswith(" events")]
    pool_status = others.count("patch craftsandboxpools/status")
    assert [write for write in others if write != "patch craftsandboxpools/status"] == sorted(
        [
            "patch craftsandboxes",  # the finalizer
            "create secrets",  # the PAT, for the pod's Secret volume and for on-call
            "create configmaps",  # the SKILL.md's source
            "patch pods",  # the claim
            "patch craftsandboxes/status",  # one status write: claimed, validated, synced
            "create pods",  # the pool's refill
        ]
    ), writes
    # Once, unless the refill's pod came Ready only after the first write (then twice).
    assert 1 <= pool_status <= 2, writes
    # One event: the claim's pass held its status and events for the pass collecting the
    # library's sync, which said both.
    said = [(e["type"], e["reason"], e["count"]) for e in cluster.events(namespace, "alice")]
    assert said == [("Normal", "LibrarySynced", 1)], said
    assert reasons(cluster, namespace, "alice") == [
        "PATMinted",
        "SecretCreated",
        "ConfigMapCreated",
        "PodClaimed",
        "CLIValidated",
        "LibrarySynced",
    ]
    assert writes.count("create events") == 2, writes  # and the pool's one, PoolPodsCreated


def test_a_sandbox_naming_a_pool_is_ready_on_the_claimed_pod_with_its_token_skill_and_library(
    cluster: Cluster, namespace: str, operator: OperatorProcess, s3: Any, bucket: str
) -> None:
    files = {f"notes/file-{index}.md": f"note {index}\n".encode() * 50 for index in range(10)}
    upload(s3, bucket, files)
    a_pool(cluster, namespace, 2)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "pool full")
    warm = {
        pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pool_pods(cluster, namespace)
    }

    created = cluster.create(SANDBOXES, namespace, sandbox("alice", poolRef={"name": "warm"}))

    ready, pod = ready_on(cluster, namespace, "alice", operator)
    meta = pod["metadata"]
    assert warm.get(meta["name"]) == meta["uid"] == ready["podUID"], (warm, ready)
    assert "PodClaimed" in reasons(cluster, namespace, "alice")
    assert "ColdStart" not in reasons(cluster, namespace, "alice")
    # The pod is the sandbox's now: nothing of the pool's, every label of the sandbox's.
    labels = meta["labels"]
    assert POOL_LABEL not in labels
    assert labels[CLAIMED_FROM] == "warm"
    assert labels["onyx.app/sandbox-id"] == created["metadata"]["uid"]
    assert labels["craft.onyx.app/sandbox"] == "alice"
    assert all(key in labels for key in SANDBOX_LABELS), labels
    assert [(ref["kind"], ref["uid"]) for ref in meta["ownerReferences"]] == [
        ("CraftSandbox", created["metadata"]["uid"])
    ]
    # Delivered into the running pod: the token, the SKILL.md, the library.
    secret = cluster.get("/api/v1/secrets", namespace, "alice-credentials")
    assert secret is not None
    token = base64.b64decode(secret["data"]["ONYX_PAT"]).decode()
    assert exec_in_pod(cluster, namespace, meta["name"], "cat", "/run/onyx/pat").decode() == token
    assert token not in str(pod)
    skill = (cluster.get("/api/v1/configmaps", namespace, "alice-skills") or {})["data"]
    in_pod = exec_in_pod(
        cluster, namespace, meta["name"], "cat", "/workspace/skills/company-search/SKILL.md"
    )
    assert in_pod.decode() == skill["SKILL.md"]
    assert library_in_pod(cluster, namespace, meta["name"]) == files
    assert ready["userLibrary"]["files"] == 10
    assert cluster.condition(namespace, "alice", "CLIValidated")["status"] == "True"
    # The pool refills, and counts the claimed pod as claimed, not as its own.
    until(
        cluster,
        namespace,
        operator,
        lambda: refilled_with_one_claimed(cluster, namespace),
        "the pool refilled",
    )
    assert meta["name"] not in {pod["metadata"]["name"] for pod in pool_pods(cluster, namespace)}


def test_a_resumed_sandbox_claims_again_and_a_pool_update_leaves_claimed_pods_alone(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    a_pool(cluster, namespace, 2)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "pool full")
    cluster.create(SANDBOXES, namespace, sandbox("alice", poolRef={"name": "warm"}))
    _, first = ready_on(cluster, namespace, "alice", operator)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "refilled")

    cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"suspend": True}})
    until(
        cluster,
        namespace,
        operator,
        lambda: (
            status(cluster, namespace, "alice").get("phase") == "Suspended"
            and cluster.get(PODS, namespace, first["metadata"]["name"]) is None
        ),
        "suspended, its pod gone",
    )
    warm = {pod["metadata"]["uid"] for pod in pool_pods(cluster, namespace)}
    cluster.patch(SANDBOXES, namespace, "alice", {"spec": {"suspend": False}})

    _, woken = ready_on(cluster, namespace, "alice", operator)
    assert woken["metadata"]["uid"] in warm, "the resumed sandbox did not take a pool pod"
    assert woken["metadata"]["labels"][CLAIMED_FROM] == "warm"
    assert reasons(cluster, namespace, "alice").count("PodClaimed") == 2

    # An image change replaces the pool's unclaimed pods, never the one alice claimed.
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "refilled")
    with platform_allowing(cluster, images=["craft-sandbox"]):  # the new image, allowed
        cluster.patch(POOLS, namespace, "warm", {"spec": {"image": "craft-sandbox:0.2.0"}})
        until(
            cluster,
            namespace,
            operator,
            lambda: pool_full(cluster, namespace, 2, image="craft-sandbox:0.2.0"),
            "the pool's pods replaced",
        )
    kept = cluster.get(PODS, namespace, woken["metadata"]["name"])
    assert kept is not None
    assert kept["metadata"]["uid"] == woken["metadata"]["uid"]
    assert not kept["metadata"].get("deletionTimestamp")
    assert status(cluster, namespace, "alice")["phase"] == "Ready"
    assert "PodReplaced" not in reasons(cluster, namespace, "alice")


def test_eight_sandboxes_claiming_at_once_from_a_pool_of_five_never_share_a_pod(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    a_pool(cluster, namespace, 5)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 5), "pool full")
    names = [f"user-{index}" for index in range(8)]

    with ThreadPoolExecutor(max_workers=8) as threads:
        list(
            threads.map(
                lambda name: cluster.create(
                    SANDBOXES, namespace, sandbox(name, poolRef={"name": "warm"})
                ),
                names,
            )
        )

    pods = {name: ready_on(cluster, namespace, name, operator)[1] for name in names}
    uids = [pod["metadata"]["uid"] for pod in pods.values()]
    assert len(set(uids)) == 8, "two sandboxes share a pod"
    claimed = [name for name, pod in pods.items() if CLAIMED_FROM in pod["metadata"]["labels"]]
    cold = sorted(set(names) - set(claimed))
    print(f"claimed {len(claimed)}, cold {len(cold)}: {cold}")
    # Five were Ready when the sandboxes came; more only if refilled pods were Ready in time.
    assert len(claimed) >= 1
    assert all(pods[name]["metadata"]["name"].startswith("warm-") for name in claimed)
    for name in claimed:
        assert "PodClaimed" in reasons(cluster, namespace, name)
        assert "ColdStart" not in reasons(cluster, namespace, name)
    for name in cold:
        assert pods[name]["metadata"]["name"] == name  # a pod of its own, made for it
        said = step_messages(cluster.events(namespace, name), "ColdStart")
        assert said, reasons(cluster, namespace, name)
        assert "(PoolEmpty)" in said[0] or "(ClaimConflict)" in said[0], said
    for name, pod in pods.items():
        owners = pod["metadata"]["ownerReferences"]
        assert [ref["name"] for ref in owners] == [name]
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 5), "refilled")


def test_tolerations_spelled_otherwise_claim_the_pools_pods_on_the_real_api_server(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """An empty key or value means none, and the API server drops it as it stores the pod:
    a sandbox that spells its tolerations so is no reason for a cold start."""
    allowed = {"images": ["craft-sandbox"], "tolerations": [{"operator": "Exists"}]}
    with platform_allowing(cluster, **allowed):
        a_pool(cluster, namespace, 1, tolerations=[{"operator": "Exists"}])
        until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 1), "pool full")
        warm = {pod["metadata"]["uid"] for pod in pool_pods(cluster, namespace)}

        cluster.create(
            SANDBOXES,
            namespace,
            sandbox(
                "alice",
                poolRef={"name": "warm"},
                tolerations=[{"key": "", "operator": "Exists", "value": ""}],
            ),
        )

        ready, pod = ready_on(cluster, namespace, "alice", operator)
        assert pod["metadata"]["uid"] in warm, ready
        assert "ColdStart" not in reasons(cluster, namespace, "alice")


def test_an_unclaimed_pod_out_of_the_watches_sight_is_deleted_and_a_scale_down_reads_nothing(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """The API server reports a pod whose managed-by label was edited away as deleted to a
    watch that selects by it: the pool replaces it and deletes it. A pod deleted through
    the API server carries deletionTimestamp in its DELETED event: a scale-down's pods are
    never read back."""
    a_pool(cluster, namespace, 3)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 3), "pool full")
    before = len(audited_requests(cluster.plane))
    cluster.patch(POOLS, namespace, "warm", {"spec": {"replicas": 1}})
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 1), "scaled down")
    until(
        cluster,
        namespace,
        operator,
        lambda: len(cluster.list(PODS, namespace, selector=f"{POOL_LABEL}=warm")) == 1,
        "the surplus gone",
    )
    time.sleep(1.0)  # a pool pass after the pods' DELETED events
    reads = [
        event["requestURI"]
        for event in audited_requests(cluster.plane)[before:]
        if event["verb"] == "get" and event.get("objectRef", {}).get("resource") == "pods"
    ]
    assert reads == []
    lost = pool_pods(cluster, namespace)[0]["metadata"]["name"]

    cluster.patch(PODS, namespace, lost, {"metadata": {"labels": {MANAGED_BY: None}}})

    until(
        cluster,
        namespace,
        operator,
        lambda: going(cluster, namespace, lost),
        "the pod out of sight deleted",
    )
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 1), "refilled")


def test_a_claimed_pod_whose_managed_by_label_was_removed_is_kept_and_no_second_is_claimed(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """The API server tells the watches a claimed pod that left their selector was deleted,
    while it runs on with the user's token and files: it is read back by the name the
    status records and relabelled; no second pod is claimed or made beside it."""
    a_pool(cluster, namespace, 2)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "pool full")
    cluster.create(SANDBOXES, namespace, sandbox("alice", poolRef={"name": "warm"}))
    ready, first = ready_on(cluster, namespace, "alice", operator)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "refilled")
    claimed = first["metadata"]["name"]

    cluster.patch(PODS, namespace, claimed, {"metadata": {"labels": {MANAGED_BY: None}}})

    until(
        cluster,
        namespace,
        operator,
        lambda: (
            (
                (cluster.get(PODS, namespace, claimed) or {}).get("metadata", {}).get("labels")
                or {}
            ).get(MANAGED_BY)
            == "craft-operator"
        ),
        "the label put back",
    )
    time.sleep(2.0)  # room for a second claim or a cold pod to show
    pods = [
        pod["metadata"]["name"]
        for pod in cluster.list(PODS, namespace, selector="craft.onyx.app/sandbox=alice")
    ]
    assert pods == [claimed]
    assert (cluster.get(PODS, namespace, claimed) or {})["metadata"]["uid"] == ready["podUID"]
    after = status(cluster, namespace, "alice")
    assert (after["phase"], after["podName"]) == ("Ready", claimed)
    # The pool, which counted the pod gone for a moment, counts it claimed again (routine
    # counts share a status write a few seconds apart).
    until(
        cluster,
        namespace,
        operator,
        lambda: refilled_with_one_claimed(cluster, namespace),
        "the pool counting the pod claimed again",
    )


def test_a_pod_out_of_sight_while_no_operator_ran_is_deleted_by_the_next_one(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """No watch was open to report it: the next process finds it by listing the pool's pods
    without the managed-by label (a `!=` selector, as the real API server reads it)."""
    a_pool(cluster, namespace, 2)
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "pool full")
    lost = pool_pods(cluster, namespace)[0]["metadata"]["name"]
    operator.kill()

    cluster.patch(PODS, namespace, lost, {"metadata": {"labels": {MANAGED_BY: None}}})
    operator.start()

    until(
        cluster,
        namespace,
        operator,
        lambda: going(cluster, namespace, lost),
        "the pod out of sight deleted",
    )
    until(cluster, namespace, operator, lambda: pool_full(cluster, namespace, 2), "refilled")
    assert "pods out of sight not listed" not in operator.log_tail(200)

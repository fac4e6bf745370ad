"""The operator keeps a CraftSandboxPool full: through kopf's watches and its own queue, it
creates the pool's pods, refills one that was deleted or claimed, replaces them on a
template change without touching a claimed one, and reports the counts in the status."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.kinds import LABEL_MANAGED_BY
from craft_operator.policy.models import POLICY_NAME
from tests.integration.helpers import NAMESPACE
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, start_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.policy import POLICIES, allow
from tests.support.pools import POOLS, pool
from tests.support.sandbox_namespace import NETWORK_POLICIES

NAME = "warm"


def unclaimed(emulator: KubeEmulator) -> list[dict[str, Any]]:
    """The pool's live pods."""
    return [
        pod
        for pod in emulator.list("v1/pods", NAMESPACE)
        if pod["metadata"].get("labels", {}).get(LABEL_POOL) == NAME
        and not pod["metadata"].get("deletionTimestamp")
    ]


def pool_status(emulator: KubeEmulator) -> dict[str, Any]:
    return dict(emulator.get(POOLS, NAMESPACE, NAME).get("status") or {})


def run_all(emulator: KubeEmulator) -> int:
    """Play the kubelet: every pool pod runs and is Ready."""
    pods = unclaimed(emulator)
    for pod in pods:
        if pod.get("status", {}).get("phase") != "Running":
            mark_pod_running(emulator, NAMESPACE, pod["metadata"]["name"])
    return len(pods)


async def full(emulator: KubeEmulator, replicas: int, **expected: Any) -> dict[str, Any]:
    """Wait until the pool reports ``replicas`` Ready pods (and ``expected`` status fields)."""

    def check() -> dict[str, Any] | None:
        run_all(emulator)
        status = pool_status(emulator)
        wanted = {"ready": replicas, "creating": 0, **expected}
        return status if all(status.get(k) == v for k, v in wanted.items()) else None

    return dict(await eventually(check, what=f"{replicas} ready pool pods"))


async def test_the_operator_keeps_a_pool_full(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(
        POOLS, {**pool(NAME, replicas=3), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    status = await full(emulator, 3)
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]

    gone = unclaimed(emulator)[0]["metadata"]["name"]
    emulator.remove("v1/pods", NAMESPACE, gone)
    await full(emulator, 3)
    assert gone not in {pod["metadata"]["name"] for pod in unclaimed(emulator)}

    claimed = unclaimed(emulator)[0]
    name = claimed["metadata"]["name"]
    emulator.patch(
        "v1/pods",
        NAMESPACE,
        name,
        {
            "metadata": {
                "labels": {LABEL_POOL: None, LABEL_CLAIMED_FROM: NAME},
                "ownerReferences": [
                    {
                        "apiVersion": "craft.onyx.app/v1alpha1",
                        "kind": "CraftSandbox",
                        "name": "alice",
                        "uid": "alice-uid",
                        "controller": True,
                    }
                ],
            }
        },
    )
    await full(emulator, 3, claimed=1)

    allow(emulator, images=["craft-sandbox"])  # the platform allows the new image
    emulator.patch(POOLS, NAMESPACE, NAME, {"spec": {"image": "craft-sandbox:0.2.0"}})
    await eventually(
        lambda: (
            run_all(emulator) == 3
            and {p["spec"]["containers"][0]["image"] for p in unclaimed(emulator)}
            == {"craft-sandbox:0.2.0"}
        ),
        what="every unclaimed pod replaced",
    )
    await full(emulator, 3, claimed=1)
    assert emulator.find("v1/pods", NAMESPACE, name) is not None, "the claimed pod stays"

    emulator.patch(POOLS, NAMESPACE, NAME, {"spec": {"replicas": 1}})
    await full(emulator, 1, claimed=1)
    assert len(unclaimed(emulator)) == 1

    emulator.remove(POOLS, NAMESPACE, NAME)
    await eventually(lambda: unclaimed(emulator) == [], what="the pool's pods deleted")
    assert emulator.find("v1/pods", NAMESPACE, name) is not None, "the claimed pod stays"


@pytest.mark.parametrize(
    "label",
    [
        # The watches select by it: the API server tells them the pod was deleted while it
        # runs on.
        LABEL_MANAGED_BY,
        # The watches still see it, but the pool counts its pods by it and no claim takes a
        # pod without it.
        LABEL_POOL,
    ],
    ids=["managed-by", "pool"],
)
async def test_an_unclaimed_pod_whose_label_was_removed_is_replaced_and_deleted(
    emulator: KubeEmulator, operator: OperatorContext, label: str
) -> None:
    """The pool makes another, and deletes the one out of its sight (never claimed, it
    would run until the pool went)."""
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 2)
    target = unclaimed(emulator)[0]["metadata"]["name"]

    emulator.patch("v1/pods", NAMESPACE, target, {"metadata": {"labels": {label: None}}})

    await eventually(
        lambda: emulator.find("v1/pods", NAMESPACE, target) is None, what="the pod deleted"
    )
    await full(emulator, 2)
    assert len(unclaimed(emulator)) == 2
    said = [
        event
        for event in emulator.list("v1/events", NAMESPACE)
        if event.get("reason") == "PoolPodOutOfSight"
    ]
    assert said
    assert target in said[0]["message"]


@pytest.mark.parametrize("lost", ["noted-then-killed", "while-down"])
async def test_a_pod_out_of_sight_is_deleted_by_the_next_operator_too(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec, lost: str
) -> None:
    """What one process noted of a pod leaving the watches' sight dies with it (a SIGKILL
    before the pool's pass), and a label edited while no replica was active was never seen
    at all: the next operator finds such a pod by listing, and deletes it."""
    url = str(emulator.url).rstrip("/")
    first = await start_operator(url, settings, exec_transport=pod_exec)
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 2)
    target = unclaimed(emulator)[0]["metadata"]["name"]
    unlabel = {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    if lost == "noted-then-killed":
        emulator.patch("v1/pods", NAMESPACE, target, unlabel)
        noted = first.context.pool_reconciler.out_of_sight
        await eventually(lambda: target in noted.noted((NAMESPACE, NAME)), what="the note")
        await first.kill()  # within the pool's event delay, before its pass
    else:
        await first.kill()
        emulator.patch("v1/pods", NAMESPACE, target, unlabel)

    second = await start_operator(url, settings, exec_transport=pod_exec)
    try:
        await eventually(
            lambda: emulator.find("v1/pods", NAMESPACE, target) is None, what="the pod deleted"
        )
        await full(emulator, 2)
    finally:
        await second.stop()


async def test_a_pool_pod_that_ended_is_replaced_with_word_of_how_its_container_ended(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """A kubelet reports an OOM kill on the container only and posts no event, and the pool
    deletes the pod at once: its event is the one record on-call has."""
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 2)
    victim = unclaimed(emulator)[0]["metadata"]["name"]
    killed = {
        "name": "sandbox",
        "ready": False,
        "restartCount": 0,
        "image": "craft-sandbox:0.1.0",
        "imageID": "",
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
    }
    emulator.patch(
        "v1/pods",
        NAMESPACE,
        victim,
        {"status": {"phase": "Failed", "containerStatuses": [killed]}},
        subresource="status",
    )

    def ended_event() -> str | None:
        for event in emulator.list("v1/events", NAMESPACE):
            if event["involvedObject"].get("name") == NAME and event["reason"] == "PoolPodEnded":
                return str(event["message"])
        return None

    message = await eventually(ended_event, what="a PoolPodEnded event")
    assert f"{victim} (container sandbox: OOMKilled, exit code 137)" in message


async def test_a_pool_says_at_once_when_the_policy_restricting_its_pods_egress_goes(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """Not at its next pod event or resync: 'new pods may start' while none would."""
    emulator.create(
        POOLS, {**pool(NAME, replicas=1), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )

    def egress() -> dict[str, Any]:
        conditions = pool_status(emulator).get("conditions") or []
        return next((c for c in conditions if c["type"] == "EgressRestricted"), {})

    await eventually(lambda: egress().get("status") == "True", what="EgressRestricted True")

    for policy in emulator.list(NETWORK_POLICIES, NAMESPACE):
        emulator.remove(NETWORK_POLICIES, NAMESPACE, policy["metadata"]["name"])

    await eventually(lambda: egress().get("status") == "False", what="EgressRestricted False")


def ready_reason(emulator: KubeEmulator) -> str | None:
    conditions = pool_status(emulator).get("conditions", [])
    return next((c["reason"] for c in conditions if c["type"] == "Ready"), None)


async def test_a_pool_scaled_down_while_the_policy_is_missing_deletes_its_surplus_pods(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    # An autoscaler or kubectl scale during a GitOps prune of the policy: nothing is
    # created until the policy is back, but what the pool no longer wants goes.
    image = "registry.example.com/craft/sandbox:1.2"
    allow(emulator, images=["registry.example.com/craft/"])
    body = pool(NAME, replicas=3, image=image)
    emulator.create(POOLS, {**body, "metadata": {"name": NAME, "namespace": NAMESPACE}})
    await full(emulator, 3)
    emulator.remove(POLICIES, None, POLICY_NAME)
    await eventually(lambda: ready_reason(emulator) == "PolicyMissing", what="PolicyMissing")

    emulator.patch(POOLS, NAMESPACE, NAME, {"spec": {"replicas": 1}})

    await eventually(lambda: len(unclaimed(emulator)) == 1, what="the pool scaled down to 1")
    await asyncio.sleep(0.5)
    assert len(unclaimed(emulator)) == 1
    assert ready_reason(emulator) == "PolicyMissing"


async def test_old_pods_whose_image_the_policy_bans_mid_update_go_at_once(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    # The pool moves to a new image whose pods are not Ready yet (a slow pull), and the
    # platform bans the old image (a CVE): the old pods must not wait for their replacements.
    old, new = "registry.example.com/legacy/sandbox:1.2", "registry.example.com/craft/sandbox:1.3"
    allow(emulator, images=["registry.example.com/"])
    body = pool(NAME, replicas=2, image=old)
    emulator.create(POOLS, {**body, "metadata": {"name": NAME, "namespace": NAMESPACE}})
    await full(emulator, 2)
    emulator.patch(POOLS, NAMESPACE, NAME, {"spec": {"image": new}})
    await eventually(lambda: new in images_of(unclaimed(emulator)), what="a pod of the new image")

    allow(emulator, images=["registry.example.com/craft/"])

    await eventually(lambda: old not in images_of(unclaimed(emulator)), what="old pods deleted")
    # Said once the pass that deleted them ends, which may be a moment after the deletes.
    await eventually(
        lambda: (
            "PoolPodImageDenied"
            in [event.get("reason") for event in emulator.list("v1/events", NAMESPACE)]
        ),
        what="the deletion said",
    )


def images_of(pods: list[dict[str, Any]]) -> list[str]:
    return [pod["spec"]["containers"][0]["image"] for pod in pods]

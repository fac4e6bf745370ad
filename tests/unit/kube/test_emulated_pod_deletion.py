"""The emulator deletes pods as the API server does: a scheduled pod that has not ended
gracefully (the pod strategy's CheckGracefulDelete), until the kubelet removes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from craft_operator.kube.client import PODS, KubeClient
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_failed, mark_pod_running
from tests.unit.kube.conftest import NAMESPACE


def make_pod(emulator: KubeEmulator, name: str = "p", **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }
    return emulator.create("v1/pods", body)


def due_in(pod: dict[str, Any]) -> float:
    stamp = datetime.strptime(pod["metadata"]["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    return (stamp.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds()


async def test_a_running_pod_is_marked_and_answered_then_the_kubelet_removes_it(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    made = make_pod(emulator)
    mark_pod_running(emulator, NAMESPACE, "p")

    answer = await kube.delete(PODS, NAMESPACE, "p", uid=made["metadata"]["uid"])

    assert answer is not None
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert 28 <= due_in(answer) <= 31
    stored = emulator.get("v1/pods", NAMESPACE, "p")
    assert stored["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]
    await eventually(lambda: emulator.find("v1/pods", NAMESPACE, "p") is None, within=2)


async def test_the_grace_period_is_the_pods_unless_the_delete_names_one(
    emulator: KubeEmulator,
) -> None:
    emulator.kubelet_delay = None
    for name, grace in (("a", None), ("b", 5)):
        make_pod(emulator, name, terminationGracePeriodSeconds=120)
        mark_pod_running(emulator, NAMESPACE, name)
        emulator.remove("v1/pods", NAMESPACE, name, grace_period_seconds=grace)
    assert emulator.get("v1/pods", NAMESPACE, "a")["metadata"]["deletionGracePeriodSeconds"] == 120
    assert emulator.get("v1/pods", NAMESPACE, "b")["metadata"]["deletionGracePeriodSeconds"] == 5


async def test_a_grace_period_of_zero_an_unscheduled_or_an_ended_pod_goes_at_once(
    emulator: KubeEmulator,
) -> None:
    make_pod(emulator, "forced")
    mark_pod_running(emulator, NAMESPACE, "forced")
    make_pod(emulator, "pending")
    make_pod(emulator, "failed")
    mark_pod_failed(emulator, NAMESPACE, "failed")

    emulator.remove("v1/pods", NAMESPACE, "forced", grace_period_seconds=0)
    emulator.remove("v1/pods", NAMESPACE, "pending")
    emulator.remove("v1/pods", NAMESPACE, "failed")

    assert emulator.list("v1/pods", NAMESPACE) == []


async def test_deleting_again_only_shortens_the_grace_period(emulator: KubeEmulator) -> None:
    emulator.kubelet_delay = None
    make_pod(emulator)
    mark_pod_running(emulator, NAMESPACE, "p")
    first = emulator.remove("v1/pods", NAMESPACE, "p")

    assert emulator.remove("v1/pods", NAMESPACE, "p") == first
    assert emulator.remove("v1/pods", NAMESPACE, "p", grace_period_seconds=60) == first
    shorter = emulator.remove("v1/pods", NAMESPACE, "p", grace_period_seconds=5)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    assert due_in(shorter) <= 6
    emulator.remove("v1/pods", NAMESPACE, "p", grace_period_seconds=0)
    assert emulator.find("v1/pods", NAMESPACE, "p") is None


async def test_without_the_kubelet_a_pod_stays_being_deleted_until_a_test_removes_it(
    emulator: KubeEmulator,
) -> None:
    emulator.kubelet_delay = None
    made = make_pod(emulator)
    mark_pod_running(emulator, NAMESPACE, "p")
    emulator.remove("v1/pods", NAMESPACE, "p")

    assert not emulator.kubelet_remove(NAMESPACE, "p", uid="another-pod")
    assert emulator.find("v1/pods", NAMESPACE, "p") is not None
    assert emulator.kubelet_remove(NAMESPACE, "p", uid=made["metadata"]["uid"])
    assert emulator.find("v1/pods", NAMESPACE, "p") is None


async def test_a_pod_being_deleted_stays_without_its_finalizers_until_the_kubelet_is_done(
    emulator: KubeEmulator,
) -> None:
    emulator.kubelet_delay = None
    make_pod(emulator)
    emulator.patch("v1/pods", NAMESPACE, "p", {"metadata": {"finalizers": ["example.com/x"]}})
    mark_pod_running(emulator, NAMESPACE, "p")
    emulator.remove("v1/pods", NAMESPACE, "p")

    emulator.patch("v1/pods", NAMESPACE, "p", {"metadata": {"finalizers": None}})
    assert emulator.find("v1/pods", NAMESPACE, "p") is not None
    emulator.kubelet_remove(NAMESPACE, "p")
    assert emulator.find("v1/pods", NAMESPACE, "p") is None


async def test_the_last_event_of_a_gracefully_deleted_pod_carries_its_deletion(
    emulator: KubeEmulator,
) -> None:
    make_pod(emulator)
    mark_pod_running(emulator, NAMESPACE, "p")
    marked = emulator.remove("v1/pods", NAMESPACE, "p")
    await eventually(lambda: emulator.find("v1/pods", NAMESPACE, "p") is None, within=2)

    kind, gone, _ = emulator._events[emulator._resource("v1/pods")][-1][1]
    assert kind == "DELETED"
    assert gone["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]

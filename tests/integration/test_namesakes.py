"""A sandbox deleted and created again at once under its name (the backend resetting one):
while the earlier sandbox's pod or library volume is still being deleted, the new one waits
for the name, says so with a reason that asks nobody to act, takes nothing of the earlier
one's, and is Ready once it is gone."""

from __future__ import annotations

from typing import Any

from craft_operator.client.readiness import failure_of, progress_of
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, condition, phase, pod, sandbox, status
from tests.integration.test_library_jobs import (
    finish_job,
    first_job_running,
    job_mode_sandbox,
)
from tests.integration.test_pools import NAME, full
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running
from tests.support.pools import POOLS, pool

PVCS = "v1/persistentvolumeclaims"
PROTECTION = "kubernetes.io/pvc-protection"


def uid(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["uid"])


async def deleted_while_its_pod_stops(emulator: KubeEmulator, **spec: Any) -> dict[str, Any]:
    """A Ready sandbox ``alice`` deleted; it is gone while its pod still stops (a grace
    period the test ends itself). Returns that pod."""
    emulator.create(SANDBOXES, sandbox("alice", **spec))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    emulator.kubelet_delay = None  # the kubelet never finishes: the test removes the pod
    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")
    old = pod(emulator, "alice")
    assert old is not None
    assert old["metadata"].get("deletionTimestamp"), "still stopping"
    return old


async def waits_without_failing(emulator: KubeEmulator, type_: str, reason: str) -> dict[str, Any]:
    """Condition ``type_`` of ``alice`` once said, which must be ``reason``; and what the
    backend's client concludes: no failure that waits for someone to act."""
    said: dict[str, Any] = await eventually(
        lambda: (c := condition(emulator, "alice", type_)).get("reason") and c,
        what=f"{type_} said",
    )
    assert said["reason"] == reason, said
    failure = failure_of(progress_of(emulator.get(SANDBOXES, NAMESPACE, "alice")))
    assert failure is None, failure
    return said


async def test_a_recreated_sandbox_waits_for_its_predecessors_pod_then_gets_its_own(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    old = await deleted_while_its_pod_stops(emulator)

    created = emulator.create(SANDBOXES, sandbox("alice"))

    waiting = await waits_without_failing(emulator, "PodReady", "PodTerminating")
    assert "another object's pod alice is stopping" in waiting["message"]
    assert uid(pod(emulator, "alice")) == uid(old), "the stopping pod is not taken, nor replaced"

    emulator.kubelet_remove(NAMESPACE, "alice")
    fresh = await eventually(
        lambda: (p := pod(emulator, "alice")) and uid(p) != uid(old) and p, what="a new pod"
    )
    assert [ref["uid"] for ref in fresh["metadata"]["ownerReferences"]] == [uid(created)]
    mark_pod_running(emulator, NAMESPACE, "alice")
    ready = await phase(emulator, "alice", "Ready")
    assert ready["podUID"] == uid(fresh)


async def test_a_recreated_sandbox_naming_a_pool_claims_while_its_predecessors_pod_stops(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(
        POOLS, {**pool(NAME, replicas=1), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 1)
    old = await deleted_while_its_pod_stops(emulator)

    emulator.create(SANDBOXES, sandbox("alice", poolRef={"name": NAME}))

    ready = await phase(emulator, "alice", "Ready")
    assert ready["claimedFrom"] == NAME
    assert ready["podName"] != "alice"
    assert uid(pod(emulator, "alice")) == uid(old), "the stopping pod is left to stop"


async def test_a_recreated_job_mode_sandbox_waits_for_its_predecessors_library_volume(
    emulator: KubeEmulator, job_mode_operator: OperatorContext
) -> None:
    await first_job_running(emulator)
    finish_job(emulator, "alice-library-1", result={"ok": True, "files": 1, "bytes": 1})
    await phase(emulator, "alice", "Ready")
    # As on a cluster: a volume a pod mounts is held by pvc-protection until the pod goes.
    emulator.patch(PVCS, NAMESPACE, "alice-library", {"metadata": {"finalizers": [PROTECTION]}})
    old = emulator.get(PVCS, NAMESPACE, "alice-library")
    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")
    assert emulator.get(PVCS, NAMESPACE, "alice-library")["metadata"].get("deletionTimestamp")

    created = emulator.create(SANDBOXES, job_mode_sandbox())

    waiting = await waits_without_failing(emulator, "UserLibrarySynced", "VolumeTerminating")
    assert "still being deleted" in waiting["message"]

    emulator.patch(PVCS, NAMESPACE, "alice-library", {"metadata": {"finalizers": None}})
    fresh = await eventually(
        lambda: (v := emulator.find(PVCS, NAMESPACE, "alice-library")) and uid(v) != uid(old) and v,
        what="the sandbox's own volume",
        within=15,
    )
    assert [ref["uid"] for ref in fresh["metadata"]["ownerReferences"]] == [uid(created)]
    assert status(emulator, "alice").get("phase") != "Failed"

"""The workspace against the emulated API server and the real operator loop: one PVC for
the sandbox's whole life (sleep, wake, a new pod), deleted with it unless retained, and a
retained one taken back only by the same user's new sandbox of that name."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp.web
from kmock._internal import rendering

from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    event_reasons,
    phase,
    pod,
    pod_gone,
    pod_of,
    sandbox,
    status,
)
from tests.support.emulator import KubeEmulator
from tests.support.faults import failure_response
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_failed, mark_pod_running
from tests.support.policy import allow

PVCS = "v1/persistentvolumeclaims"
OTHER_USER = "9a1d7c44-0b2e-4f3a-8c5d-6e7f8a9b0c1d"
IMAGE = "registry.example.com/craft/sandbox:1.2"


def workspace_pvc(emulator: KubeEmulator, name: str = "alice") -> dict[str, Any] | None:
    return emulator.find(PVCS, NAMESPACE, f"{name}-workspace")


def mounted_claim(pod_: dict[str, Any]) -> str:
    """The claim the pod mounts at /workspace/sessions."""
    [mount] = [
        m
        for m in pod_["spec"]["containers"][0]["volumeMounts"]
        if m["mountPath"] == "/workspace/sessions"
    ]
    [volume] = [v for v in pod_["spec"]["volumes"] if v["name"] == mount["name"]]
    return str(volume["persistentVolumeClaim"]["claimName"])


async def ready_with_workspace(
    emulator: KubeEmulator, name: str = "alice", **workspace: Any
) -> dict[str, Any]:
    """A Ready sandbox with a workspace; its PVC."""
    created = emulator.create(SANDBOXES, sandbox(name, workspace={"size": "1Gi", **workspace}))
    # Its own pod, not the one of a sandbox of that name deleted just before (stopping).
    running = await eventually(lambda: pod_of(emulator, name, created), what="the pod")
    mark_pod_running(emulator, NAMESPACE, name)
    await phase(emulator, name, "Ready")
    pvc = workspace_pvc(emulator, name)
    assert pvc is not None
    assert mounted_claim(running) == pvc["metadata"]["name"]
    return pvc


async def test_the_workspace_is_made_mounted_and_reported(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    pvc = await ready_with_workspace(emulator)
    owner = pvc["metadata"]["ownerReferences"][0]
    assert owner["uid"] == emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]
    reported = status(emulator, "alice")["workspace"]
    assert reported["claimName"] == "alice-workspace"
    assert reported["requested"] == "1Gi"
    assert reported["retain"] is False
    assert reported["claimUID"] == pvc["metadata"]["uid"], "the backend sees it without PVC access"


async def test_the_same_workspace_survives_sleep_wake_and_a_new_pod(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    uid = (await ready_with_workspace(emulator))["metadata"]["uid"]

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": True}})
    await phase(emulator, "alice", "Suspended")
    await pod_gone(emulator, "alice")
    slept = workspace_pvc(emulator)
    assert slept is not None
    assert slept["metadata"]["uid"] == uid, "kept while the sandbox sleeps"

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": False}})
    woken = await eventually(lambda: pod(emulator, "alice"), what="the pod after waking")
    assert mounted_claim(woken) == "alice-workspace"
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")

    old_pod = woken["metadata"]["uid"]
    mark_pod_failed(emulator, NAMESPACE, "alice")
    replaced = await eventually(
        lambda: (p := pod(emulator, "alice")) and p["metadata"]["uid"] != old_pod and p,
        what="a new pod",
    )
    assert mounted_claim(replaced) == "alice-workspace"
    kept = workspace_pvc(emulator)
    assert kept is not None
    assert kept["metadata"]["uid"] == uid, "the PVC belongs to the sandbox, not the pod"


async def test_growing_the_workspace_grows_the_pvc_and_keeps_the_pod(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_with_workspace(emulator)
    running = pod(emulator, "alice")
    assert running is not None

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"workspace": {"size": "3Gi"}}})

    await eventually(
        lambda: status(emulator, "alice").get("workspace", {}).get("requested") == "3Gi",
        what="the new size",
    )
    pvc = workspace_pvc(emulator)
    assert pvc is not None
    assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
    still = pod(emulator, "alice")
    assert still is not None
    assert still["metadata"]["uid"] == running["metadata"]["uid"], "no new pod for a resize"


async def test_the_workspace_is_deleted_with_the_sandbox(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_with_workspace(emulator)

    emulator.remove(SANDBOXES, NAMESPACE, "alice")

    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")
    await eventually(lambda: workspace_pvc(emulator) is None, what="the workspace deleted")


async def test_a_retained_workspace_outlives_the_sandbox_and_returns_to_its_user(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    uid = (await ready_with_workspace(emulator, retain=True))["metadata"]["uid"]

    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")

    kept = workspace_pvc(emulator)
    assert kept is not None
    assert kept["metadata"]["uid"] == uid
    assert not kept["metadata"].get("ownerReferences"), "the collector must leave it"
    assert kept["metadata"]["labels"]["craft.onyx.app/retained-from"] == "alice"

    await ready_with_workspace(emulator)
    adopted = workspace_pvc(emulator)
    assert adopted is not None
    assert adopted["metadata"]["uid"] == uid, "the same volume, with the user's files"
    new_sandbox = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]
    [owner] = adopted["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (new_sandbox, True)
    assert "craft.onyx.app/retained-from" not in adopted["metadata"]["labels"]
    await event_posted(emulator, "alice", "WorkspaceAdopted")


async def test_a_retained_workspace_is_refused_to_another_user(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    uid = (await ready_with_workspace(emulator, retain=True))["metadata"]["uid"]
    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")

    intruder = sandbox("alice", workspace={"size": "1Gi"})
    intruder["spec"]["user"]["id"] = OTHER_USER
    emulator.create(SANDBOXES, intruder)

    await eventually(
        lambda: condition(emulator, "alice", "PodReady").get("reason") == "WorkspaceNameTaken",
        what="WorkspaceNameTaken",
    )
    # The old sandbox's pod stops, and no pod of the intruder's takes its place.
    await pod_gone(emulator, "alice")
    assert pod(emulator, "alice") is None, "no pod mounts someone else's files"
    kept = workspace_pvc(emulator)
    assert kept is not None
    assert kept["metadata"]["uid"] == uid
    assert not kept["metadata"].get("ownerReferences")
    assert kept["metadata"]["labels"]["craft.onyx.app/user-id"] != OTHER_USER


async def test_a_policy_withdrawal_keeps_the_workspace_for_when_the_sandbox_returns(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    allow(emulator, images=["registry.example.com/craft/"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE, workspace={"size": "1Gi"}))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    uid = workspace_pvc(emulator)["metadata"]["uid"]  # type: ignore[index]

    allow(emulator, images=[])

    await event_posted(emulator, "alice", "AccessWithdrawn")
    await eventually(lambda: pod(emulator, "alice") is None, what="the pod withdrawn")
    assert emulator.find("v1/secrets", NAMESPACE, "alice-credentials") is None
    kept = workspace_pvc(emulator)
    assert kept is not None, "the user's files are not access: kept"
    assert kept["metadata"]["uid"] == uid

    allow(emulator, images=["registry.example.com/craft/"])

    back = await eventually(lambda: pod(emulator, "alice"), what="the pod back")
    assert mounted_claim(back) == "alice-workspace"
    assert workspace_pvc(emulator)["metadata"]["uid"] == uid  # type: ignore[index]


async def test_a_workspace_gone_and_not_made_again_is_not_named_in_the_status(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """Deleted while the sandbox sleeps, a quota refusing a new one: the backend reads
    ``status.workspace.claimUID`` as the sandbox's volume, and that one is gone."""
    old = (await ready_with_workspace(emulator))["metadata"]["uid"]
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": True}})
    await phase(emulator, "alice", "Suspended")

    async def quota(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.method.value.upper() == "POST" and request.url.path.endswith(
            "/persistentvolumeclaims"
        ):
            return failure_response(403, "Forbidden", "exceeded quota: no-pvc")
        return None

    emulator.before_request.append(quota)
    emulator.remove(PVCS, NAMESPACE, "alice-workspace")
    await event_posted(emulator, "alice", "WorkspaceWriteFailed")
    await eventually(
        lambda: (status(emulator, "alice").get("workspace") or {}).get("claimUID") != old,
        what="status.workspace without the deleted claim",
    )


async def test_a_larger_retained_workspace_taken_back_is_kept_without_a_refused_resize(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_with_workspace(emulator, retain=True)
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"workspace": {"size": "3Gi"}}})
    await eventually(
        lambda: (
            (workspace_pvc(emulator) or {})["spec"]["resources"]["requests"]["storage"] == "3Gi"
        ),
        what="the workspace grown",
    )
    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")

    await ready_with_workspace(emulator, retain=True)  # asks 1Gi: the 3Gi one is kept
    await event_posted(emulator, "alice", "WorkspaceLargerThanSpec")
    assert "WorkspaceResizeRefused" not in event_reasons(emulator, "alice")


async def test_a_retained_workspace_of_another_class_taken_back_says_its_class(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_with_workspace(emulator, retain=True, storageClassName="standard")
    emulator.remove(SANDBOXES, NAMESPACE, "alice")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None, what="gone")

    pvc = await ready_with_workspace(emulator, retain=True, storageClassName="fast-ssd")

    assert pvc["spec"]["storageClassName"] == "standard"  # the user's files, kept
    await event_posted(emulator, "alice", "WorkspaceStorageClassKept")
    message = status(emulator, "alice")["workspace"]["message"]
    assert "storage class standard, not fast-ssd" in message
    assert condition(emulator, "alice", "Ready")["status"] == "True"


async def test_a_retained_workspace_whose_labels_were_all_removed_gets_them_back_as_its_own(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The status records the claim: the labels go back, and it is not said to be an earlier
    sandbox's workspace taken back."""
    await ready_with_workspace(emulator, retain=True)
    seen = len(event_reasons(emulator, "alice"))
    before = emulator.get(PVCS, NAMESPACE, "alice-workspace")
    labels = dict(before["metadata"]["labels"])

    emulator.patch(
        PVCS, NAMESPACE, "alice-workspace", {"metadata": {"labels": dict.fromkeys(labels)}}
    )

    await eventually(
        lambda: (
            emulator.get(PVCS, NAMESPACE, "alice-workspace")["metadata"].get("labels") == labels
        ),
        what="the labels put back",
    )
    after = emulator.get(PVCS, NAMESPACE, "alice-workspace")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    await asyncio.sleep(0.5)  # a pass's events are posted when it ends
    assert "WorkspaceAdopted" not in event_reasons(emulator, "alice")[seen:]

"""From a new CraftSandbox to a Ready sandbox pod with credentials, skill and CLI check."""

from __future__ import annotations

import asyncio

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    USER_ID,
    event_reasons,
    events_about,
    live_pats,
    phase,
    pod,
    sandbox,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running
from tests.support.policy import allow


async def test_a_sandbox_becomes_ready_once_its_pod_is_ready(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    emulator.create(SANDBOXES, sandbox("alice", sources=[{"name": "slack"}]))

    created = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    status = await phase(emulator, "alice", "Ready")

    token = token_in_secret(emulator, "alice")
    assert token.startswith("onyx_pat_")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "CredentialsReady": "True",
        "SkillRendered": "True",
        "PodReady": "True",
        "CLIValidated": "True",
        "UserLibrarySynced": "True",
        "Ready": "True",
    }
    assert status["credentials"]["tokenDisplay"] == f"{token[:12]}****{token[-4:]}"
    assert status["skill"] == {"sourceCount": 1, "contentHash": status["skill"]["contentHash"]}
    assert status["podName"] == "alice"
    assert status["podUID"] == created["metadata"]["uid"]
    assert len(live_pats(settings)) == 1


async def test_the_pod_spec_holds_no_pat_and_mounts_the_skill_and_the_pats_volume(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    allow(emulator, serverURLs=["https://onyx.example.com"])
    emulator.create(SANDBOXES, sandbox("alice", serverURL="https://onyx.example.com"))

    created = await eventually(lambda: pod(emulator, "alice"), what="the pod")

    container = created["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["ONYX_SERVER_URL"]["value"] == "https://onyx.example.com"
    assert "ONYX_PAT" not in env, "the PAT is delivered into the running pod, not the spec"
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert mounts == {
        "/workspace/skills/company-search": "skills",
        "/workspace/user_library": "user-library",
        "/run/onyx": "onyx-credentials",
    }
    skill = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]["SKILL.md"]
    assert skill.startswith("---\nname: company-search\n")


async def test_every_child_carries_the_labels_and_an_owner_reference(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    uid = emulator.get(SANDBOXES, NAMESPACE, "alice")["metadata"]["uid"]

    for resource, name in (
        ("v1/pods", "alice"),
        ("v1/secrets", "alice-credentials"),
        ("v1/configmaps", "alice-skills"),
    ):
        meta = emulator.get(resource, NAMESPACE, name)["metadata"]
        assert meta["labels"] == {
            "app.kubernetes.io/name": "craft-sandbox",
            "app.kubernetes.io/managed-by": "craft-operator",
            "app.kubernetes.io/component": "sandbox",
            "craft.onyx.app/sandbox": "alice",
            "craft.onyx.app/user-id": USER_ID,
            "onyx.app/sandbox-id": uid,
            "onyx.app/tenant-id": "public",
        }, resource
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "craft.onyx.app/v1alpha1",
                "kind": "CraftSandbox",
                "name": "alice",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], resource


async def test_each_step_that_changes_something_posts_an_event(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")

    reasons = await eventually(
        lambda: "CLIValidated" in (found := event_reasons(emulator, "alice")) and found,
        what="the CLIValidated event",
    )
    assert reasons[:4] == ["PATMinted", "SecretCreated", "ConfigMapCreated", "PodCreated"]
    # The first pass said its four steps in one event, named after the furthest.
    first = events_about(emulator, "alice")[0]
    assert (first["type"], first["reason"], first["count"]) == ("Normal", "PodCreated", 1)
    assert first["message"].startswith("PATMinted: minted PAT ")
    assert (
        "; SecretCreated: created Secret alice-credentials; ConfigMapCreated: "
        in (first["message"])
    )
    assert first["message"].endswith("; PodCreated: created pod alice")


async def test_provisioning_takes_five_writes_and_a_resync_takes_none(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    before = len(emulator.served)
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice").get("status"))
    await asyncio.sleep(0.3)  # let any follow-up pass finish

    await asyncio.wait_for(operator.events.drained(), 10)  # provisioning's events posted
    said = [w for w in emulator.writes(before) if "/events" in w]
    assert said == [f"POST /api/v1/namespaces/{NAMESPACE}/events"], "one event for the pass"
    provisioning = [w for w in emulator.writes(before) if "/events" not in w]
    sandbox_path = f"/apis/craft.onyx.app/v1alpha1/namespaces/{NAMESPACE}/craftsandboxes/alice"
    assert sorted(provisioning) == sorted(
        [
            f"PATCH {sandbox_path}",  # the finalizer
            f"POST /api/v1/namespaces/{NAMESPACE}/secrets",
            f"POST /api/v1/namespaces/{NAMESPACE}/configmaps",
            f"POST /api/v1/namespaces/{NAMESPACE}/pods",
            f"PATCH {sandbox_path}/status",
        ]
    )

    settled = len(emulator.served)
    for _ in range(3):
        operator.queue.add((NAMESPACE, "alice"))
        await asyncio.sleep(0.1)
    assert emulator.writes(settled) == []
    assert len(emulator.served) == settled  # not even a read: children come from the cache

"""Drift repair: whatever happens to a child, the operator puts it back."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.kinds import LABEL_MANAGED_BY
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    event_reasons,
    events_about,
    live_pats,
    new_pod,
    phase,
    pod,
    sandbox,
    status,
    token_in_secret,
)
from tests.support.emulator import OPERATOR_AGENTS, KubeEmulator
from tests.support.faults import failure_response
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_failed, mark_pod_running
from tests.support.policy import allow


async def ready_sandbox(emulator: KubeEmulator, name: str = "alice") -> dict:
    emulator.create(SANDBOXES, sandbox(name, sources=[{"name": "slack"}]))
    await eventually(lambda: pod(emulator, name), what="the pod")
    mark_pod_running(emulator, NAMESPACE, name)
    return await phase(emulator, name, "Ready")


@pytest.mark.parametrize(
    ("resource", "name"),
    [("v1/secrets", "alice-credentials"), ("v1/configmaps", "alice-skills")],
)
async def test_a_deleted_secret_or_configmap_is_recreated(
    emulator: KubeEmulator, operator: OperatorContext, resource: str, name: str
) -> None:
    await ready_sandbox(emulator)
    original = emulator.get(resource, NAMESPACE, name)

    emulator.remove(resource, NAMESPACE, name)

    again = await eventually(lambda: emulator.find(resource, NAMESPACE, name), what=name)
    assert again["data"] == original["data"]
    assert again["metadata"]["uid"] != original["metadata"]["uid"]


async def test_an_edited_secret_is_put_back_without_touching_the_pat(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    await ready_sandbox(emulator)
    token = token_in_secret(emulator, "alice")
    forged = base64.b64encode(b"onyx_pat_forged").decode()

    emulator.patch(
        "v1/secrets",
        NAMESPACE,
        "alice-credentials",
        {"data": {"ONYX_PAT": forged, "EXTRA": forged}},
    )

    await eventually(
        lambda: (
            emulator.get("v1/secrets", NAMESPACE, "alice-credentials")["data"]
            == {"ONYX_PAT": base64.b64encode(token.encode()).decode()}
        ),
        what="the Secret put back",
    )
    assert len(live_pats(settings)) == 1
    await event_posted(emulator, "alice", "SecretUpdated")


async def test_an_edited_configmap_is_put_back(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    original = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"]

    emulator.patch("v1/configmaps", NAMESPACE, "alice-skills", {"data": {"SKILL.md": "# hijacked"}})

    await eventually(
        lambda: emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"] == original,
        what="the ConfigMap put back",
    )


async def test_a_deleted_pod_is_recreated(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None

    emulator.remove("v1/pods", NAMESPACE, "alice")

    await new_pod(emulator, "alice", than=first)
    await eventually(
        lambda: condition(emulator, "alice", "PodReady").get("reason") == "PodStarting"
    )
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")


async def test_a_pod_that_lost_its_managed_by_label_gets_it_back_in_a_few_requests(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    # The operator's watches select by that label, so the API server tells them the pod
    # was deleted (it left the selector) while it runs on: the pod is read back, not made
    # again (and not tried again and again against a version the cache took for deleted).
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    since = len(emulator.served)

    emulator.patch(
        "v1/pods", NAMESPACE, "alice", {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )

    relabelled = await eventually(
        lambda: (
            (pod(emulator, "alice") or {})
            .get("metadata", {})
            .get("labels", {})
            .get(LABEL_MANAGED_BY)
        ),
        what="the label put back",
    )
    assert relabelled == "craft-operator"
    await asyncio.sleep(1.0)  # room for a loop to show in the count below
    made = [
        f"{request.method} {request.url.path}"
        for request in emulator.served[since:]
        if request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS)
        and "watch" not in request.url.query
        and "/events" not in request.url.path
    ]
    # The create that finds it, the read, the labels' patch, two status writes (the
    # pod missing for a moment, then Ready again): no request is repeated.
    assert len(made) <= 6, "\n".join(made)
    assert sum(r.split()[0].endswith("POST") for r in made) == 1, made
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]
    await phase(emulator, "alice", "Ready")


async def test_a_pod_whose_image_was_edited_is_replaced(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    containers = first["spec"]["containers"]
    containers[0]["image"] = "attacker/image:latest"

    emulator.patch("v1/pods", NAMESPACE, "alice", {"spec": {"containers": containers}})

    replaced = await eventually(
        lambda: (
            (p := pod(emulator, "alice")) and p["metadata"]["uid"] != first["metadata"]["uid"] and p
        ),
        what="a replacement pod",
    )
    assert replaced["spec"]["containers"][0]["image"] == "craft-sandbox:0.1.0"
    await event_posted(emulator, "alice", "PodReplaced")


async def test_a_failed_pod_is_replaced_and_repeated_failures_end_in_failed(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    await ready_sandbox(emulator)
    seen: set[str] = set()

    for attempt in range(1, settings.max_pod_failures + 1):
        current = await eventually(
            lambda: (p := pod(emulator, "alice")) and p["metadata"]["uid"] not in seen and p,
            what=f"pod {attempt}",
        )
        seen.add(current["metadata"]["uid"])
        mark_pod_failed(emulator, NAMESPACE, "alice", reason="Evicted" if attempt == 1 else "Error")

    status = await phase(emulator, "alice", "Failed")
    assert status["podFailures"] == settings.max_pod_failures
    ready = condition(emulator, "alice", "PodReady")
    assert ready["reason"] == "PodFailedRepeatedly"
    assert "3 pods failed in a row" in ready["message"]
    kept = pod(emulator, "alice")
    assert kept is not None
    assert kept["status"]["phase"] == "Failed"
    reasons = await event_posted(emulator, "alice", "PodFailedRepeatedly")
    assert reasons.count("PodFailed") == settings.max_pod_failures - 1


async def test_a_spec_change_after_failed_gives_the_pod_another_chance(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    await test_a_failed_pod_is_replaced_and_repeated_failures_end_in_failed(
        emulator, operator, settings
    )
    failed = pod(emulator, "alice")
    assert failed is not None

    allow(emulator, images=["craft-sandbox"])
    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"image": "craft-sandbox:0.1.1"}})

    fresh = await eventually(
        lambda: (
            (p := pod(emulator, "alice"))
            and p["metadata"]["uid"] != failed["metadata"]["uid"]
            and p
        ),
        what="a fresh pod",
    )
    assert fresh["spec"]["containers"][0]["image"] == "craft-sandbox:0.1.1"
    mark_pod_running(emulator, NAMESPACE, "alice")
    status = await phase(emulator, "alice", "Ready")
    assert "podFailures" not in status


DIGEST = "@sha256:" + "a" * 64


def pin_digests(resource: object, obj: dict) -> dict:
    """A mutating webhook (Kyverno's verifyImages pins digests by default) on alice's pods."""
    if getattr(resource, "plural", None) == "pods" and obj["metadata"].get("name") == "alice":
        for container in obj["spec"]["containers"]:
            if "@" not in container["image"]:
                container["image"] += DIGEST
    return obj


def add_sidecar(resource: object, obj: dict) -> dict:
    """A mesh's injector on alice's pods (idempotent, as webhooks must be)."""
    if getattr(resource, "plural", None) == "pods" and obj["metadata"].get("name") == "alice":
        containers = obj["spec"]["containers"]
        if all(container["name"] != "istio-proxy" for container in containers):
            containers.append({**containers[0], "name": "istio-proxy", "image": "proxyv2:1.22"})
    return obj


@pytest.mark.parametrize("webhook", [pin_digests, add_sidecar], ids=["digest", "sidecar"])
async def test_a_pod_a_webhook_changed_at_admission_is_kept_as_admitted_with_a_warning(
    emulator: KubeEmulator, operator: OperatorContext, webhook: Any
) -> None:
    """Taken for an edit of its image, it was replaced as fast as pods came up, for ever."""
    emulator.mutators.append(webhook)

    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    assert "PodMutatedAtAdmission" in event_reasons(emulator, "alice")
    mark_pod_running(emulator, NAMESPACE, "alice")  # more updates of the pod: still kept
    await asyncio.sleep(1.5)  # passes enough for the loop there was

    kept = pod(emulator, "alice")
    assert kept is not None
    assert kept["metadata"]["uid"] == first["metadata"]["uid"]
    assert "PodReplaced" not in event_reasons(emulator, "alice")
    creates = [w for w in emulator.writes() if w == f"POST /api/v1/namespaces/{NAMESPACE}/pods"]
    assert len(creates) == 1

    assert status(emulator, "alice")["admittedImages"] == [
        c["image"] for c in first["spec"]["containers"]
    ]
    containers = kept["spec"]["containers"]  # an edit after admission is still one
    containers[0]["image"] = "attacker/image:latest" + DIGEST
    emulator.patch("v1/pods", NAMESPACE, "alice", {"spec": {"containers": containers}})
    await event_posted(emulator, "alice", "PodReplaced")


async def test_a_lost_status_write_after_the_create_keeps_the_pod_a_webhook_changed(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The admitted images ride on the pass's status write: losing it must not have the
    next pass take the webhook's change for an edit and replace the pod."""
    emulator.mutators.append(pin_digests)
    seen = {"created": False, "lost": 0}

    async def lose_the_first_status_write(
        request: rendering.Request,
    ) -> aiohttp.web.Response | None:
        method, path = request.method.value.upper(), request.url.path
        if method == "POST" and path.endswith(f"/namespaces/{NAMESPACE}/pods"):
            seen["created"] = True
        elif path.endswith("/craftsandboxes/alice/status") and seen["created"] and not seen["lost"]:
            seen["lost"] += 1
            return failure_response(500, "InternalError", "an internal error (injected)")
        return None

    emulator.before_request.append(lose_the_first_status_write)
    emulator.create(SANDBOXES, sandbox("alice"))
    first = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    await eventually(lambda: seen["lost"], what="the lost status write")
    await eventually(
        lambda: status(emulator, "alice").get("admittedImages"), what="the admitted images"
    )

    assert "PodReplaced" not in event_reasons(emulator, "alice")
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]


async def test_a_pod_a_webhook_changed_is_kept_under_an_older_crd_that_says_so(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """An install that skipped ``kubectl apply -k crds`` keeps the CRD of a release before
    status.admittedImages: the API server prunes it from every write. The pod is not
    replaced again and again for it, and on-call is told what the old CRD drops."""

    def older_crd(resource: object, obj: dict) -> dict:
        if getattr(resource, "plural", None) == "craftsandboxes":
            for field in ("admittedImages", "libraryVolume", "recoveredAt"):
                (obj.get("status") or {}).pop(field, None)
        return obj

    emulator.mutators.append(older_crd)
    emulator.mutators.append(pin_digests)
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    mark_pod_running(emulator, NAMESPACE, "alice")  # more updates of the pod: still kept
    await asyncio.sleep(1.5)

    assert "PodReplaced" not in event_reasons(emulator, "alice")
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]
    writes = len([w for w in emulator.writes() if w.endswith("/craftsandboxes/alice/status")])
    for n in range(3):  # passes with nothing to change write nothing, however often
        emulator.patch("v1/pods", NAMESPACE, "alice", {"metadata": {"annotations": {"n": str(n)}}})
        await asyncio.sleep(0.5)
    assert [w for w in emulator.writes() if w.endswith("/craftsandboxes/alice/status")][
        writes:
    ] == []
    dropped = [e for e in events_about(emulator, "alice") if e["reason"] == "StatusFieldsDropped"]
    assert len(dropped) == 1, "said once"
    assert "status.admittedImages" in dropped[0]["message"]
    assert "kubectl apply -k crds" in dropped[0]["message"]


async def test_a_webhook_adding_more_containers_than_the_status_keeps_still_keeps_the_pod(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The status keeps the first 64; the pod is not replaced for the rest, nor is the
    operator's status write refused."""

    def add_sidecars(resource: object, obj: dict) -> dict:
        if getattr(resource, "plural", None) == "pods" and obj["metadata"]["name"] == "alice":
            containers = obj["spec"]["containers"]
            if len(containers) < 70:
                containers.extend(
                    {**containers[0], "name": f"sidecar-{n}", "image": f"sidecar:{n}"}
                    for n in range(70)
                )
        return obj

    emulator.mutators.append(add_sidecars)
    emulator.create(SANDBOXES, sandbox("alice"))
    first = await eventually(lambda: pod(emulator, "alice"), what="the pod")
    kept = await eventually(
        lambda: status(emulator, "alice").get("admittedImages"), what="the admitted images"
    )
    mark_pod_running(emulator, NAMESPACE, "alice")
    await asyncio.sleep(1.0)

    assert len(kept) == 64
    assert "PodReplaced" not in event_reasons(emulator, "alice")
    assert "ReconcileError" not in event_reasons(emulator, "alice")
    assert pod(emulator, "alice")["metadata"]["uid"] == first["metadata"]["uid"]


async def test_whoever_edits_a_pods_image_cannot_have_it_taken_as_admitted(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The admitted images are kept where the pod's editors cannot write: not on the pod."""
    await ready_sandbox(emulator)
    first = pod(emulator, "alice")
    assert first is not None
    containers = first["spec"]["containers"]
    containers[0]["image"] = "attacker/image:latest"
    annotations = {"craft.onyx.app/admitted-images": '["attacker/image:latest"]'}
    patch = {"metadata": {"annotations": annotations}, "spec": {"containers": containers}}

    emulator.patch("v1/pods", NAMESPACE, "alice", patch)

    await event_posted(emulator, "alice", "PodReplaced")


async def test_a_pod_that_ended_says_how_its_containers_ended(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """A kubelet reports an OOM kill on the container, not the pod, and posts no event."""
    await ready_sandbox(emulator)
    emulator.patch(
        "v1/pods",
        NAMESPACE,
        "alice",
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "sandbox",
                        "ready": False,
                        "restartCount": 0,
                        "image": "craft-sandbox:0.1.0",
                        "imageID": "",
                        "state": {
                            "terminated": {
                                "reason": "OOMKilled",
                                "exitCode": 137,
                                "message": "the agent's own words: leaked-token-canary",
                            }
                        },
                    }
                ],
            }
        },
        subresource="status",
    )

    await event_posted(emulator, "alice", "PodFailed")
    said = [e["message"] for e in events_about(emulator, "alice")]
    assert any("container sandbox: OOMKilled, exit code 137" in m for m in said), said
    assert not any("leaked-token-canary" in m for m in said)

"""The operator enforces the platform's CraftSandboxPolicy and namespace tenancy itself.

These run without the ValidatingAdmissionPolicy (the emulator has none): a cluster without
it must still be safe. A sandbox the platform does not allow gets no PAT (the credentials
store is never opened), no children, phase Failed and a PolicyDenied condition and event;
one that was running when the policy tightened loses its PAT and all its children.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp.web
from kmock._internal import rendering

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.policy.models import POLICY_NAME, TENANT_LABEL
from craft_operator.reconciler.services import StoreCredentials
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    live_pats,
    phase,
    pod,
    refuse_pod_deletion,
    sandbox,
    status,
    token_in_secret,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, start_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.policy import POLICIES, allow

IMAGE = "registry.example.com/craft/sandbox:1.2"
CHILDREN = (
    ("v1/pods", "alice"),
    ("v1/secrets", "alice-credentials"),
    ("v1/configmaps", "alice-skills"),
)


def store_calls(operator: OperatorContext) -> int:
    credentials = operator.services.credentials
    assert isinstance(credentials, StoreCredentials)
    return credentials.database_calls


def children(emulator: KubeEmulator) -> list[str]:
    return [name for resource, name in CHILDREN if emulator.find(resource, NAMESPACE, name)]


async def refused(emulator: KubeEmulator, name: str) -> dict[str, Any]:
    found = await phase(emulator, name, "Failed")
    await event_posted(emulator, name, "PolicyDenied")
    return found


async def ready(emulator: KubeEmulator, name: str) -> dict[str, Any]:
    await eventually(lambda: pod(emulator, name), what="the pod")
    mark_pod_running(emulator, NAMESPACE, name)
    return await phase(emulator, name, "Ready")


async def test_a_sandbox_naming_an_image_the_platform_does_not_allow_gets_no_token(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    emulator.create(SANDBOXES, sandbox("alice", image="attacker/sandbox:latest"))

    found = await refused(emulator, "alice")

    credentials = condition(emulator, "alice", "CredentialsReady")
    assert (credentials["status"], credentials["reason"]) == ("False", "PolicyDenied")
    assert "spec.image attacker/sandbox:latest is not allowed" in credentials["message"]
    ready_condition = condition(emulator, "alice", "Ready")
    assert (ready_condition["status"], ready_condition["reason"]) == ("False", "PolicyDenied")
    assert "credentials" not in found
    assert children(emulator) == []
    assert store_calls(operator) == 0
    assert not (settings.state_dir / "craft-operator.db").exists()


async def test_every_disallowed_field_is_refused_without_a_token(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    specs = {
        "url": {"serverURL": "https://onyx.attacker.example"},
        "bucket": {"userLibrary": {"bucket": "someone-elses-files"}},
        "prefix": {"userLibrary": {"prefix": "public/knowledge/"}},
        "runtime": {"runtimeClassName": "runc"},
        "priority": {"priorityClassName": "system-node-critical"},
        "toleration": {"tolerations": [{"operator": "Exists"}]},
        "selector": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
    }
    for name, spec in specs.items():
        emulator.create(SANDBOXES, sandbox(name, **spec))

    for name in specs:
        await refused(emulator, name)
        assert condition(emulator, name, "PodReady")["reason"] == "PolicyDenied"
    assert store_calls(operator) == 0
    assert emulator.list("v1/pods", NAMESPACE) == []
    assert emulator.list("v1/secrets", NAMESPACE) == []


async def test_a_namespace_bound_to_another_tenant_refuses_the_sandbox(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    emulator.label_namespace(NAMESPACE, {TENANT_LABEL: "acme"})
    emulator.create(SANDBOXES, sandbox("alice"))

    await refused(emulator, "alice")

    message = condition(emulator, "alice", "CredentialsReady")["message"]
    assert f"namespace {NAMESPACE} belongs to tenant acme" in message
    assert "spec.user.tenantId public is not allowed here" in message
    assert store_calls(operator) == 0
    assert children(emulator) == []


async def test_what_the_policy_allows_is_provisioned(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    allow(emulator, images=["registry.example.com/craft/"], runtimeClassNames=["gvisor"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE, runtimeClassName="gvisor"))

    await ready(emulator, "alice")

    assert pod(emulator, "alice")["spec"]["containers"][0]["image"] == IMAGE


async def test_a_tightened_policy_revokes_a_running_sandboxs_token_and_removes_its_children(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    allow(emulator, images=["registry.example.com/craft/"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE))
    await ready(emulator, "alice")
    assert len(live_pats(settings)) == 1

    allow(emulator, images=[])

    await refused(emulator, "alice")
    await eventually(lambda: children(emulator) == [], what="the children removed")
    assert live_pats(settings) == []
    assert "credentials" not in status(emulator, "alice")
    await event_posted(emulator, "alice", "AccessWithdrawn")

    allow(emulator, images=["registry.example.com/craft/"])

    await ready(emulator, "alice")
    assert token_in_secret(emulator, "alice").startswith("onyx_pat_")
    assert len(live_pats(settings)) == 1


async def test_a_tenant_label_put_on_a_running_sandboxs_namespace_stops_it(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await ready(emulator, "alice")

    emulator.label_namespace(NAMESPACE, {TENANT_LABEL: "acme"})

    await refused(emulator, "alice")
    await eventually(lambda: children(emulator) == [], what="the children removed")
    assert live_pats(settings) == []


async def test_a_deleted_policy_keeps_admitted_sandboxes_running_and_refuses_new_ones(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    allow(emulator, images=["registry.example.com/craft/"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE))
    await ready(emulator, "alice")

    emulator.remove(POLICIES, None, POLICY_NAME)  # a GitOps prune, say

    await event_posted(emulator, "alice", "PolicyMissing")
    warning = condition(emulator, "alice", "PolicyEnforced")
    assert (warning["status"], warning["reason"]) == ("False", "PolicyMissing")
    assert "spec.image registry.example.com/craft/sandbox:1.2" in warning["message"]
    assert status(emulator, "alice")["phase"] == "Ready"
    assert children(emulator) == [name for _, name in CHILDREN]
    assert len(live_pats(settings)) == 1
    assert "AccessWithdrawn" not in await event_posted(emulator, "alice", "PolicyMissing")

    emulator.create(SANDBOXES, sandbox("bob", image=IMAGE))
    await refused(emulator, "bob")
    assert len(live_pats(settings)) == 1

    allow(emulator, images=["registry.example.com/craft/"])

    await eventually(
        lambda: condition(emulator, "alice", "PolicyEnforced") == {}, what="the warning cleared"
    )
    assert status(emulator, "alice")["phase"] == "Ready"


async def test_a_spec_judged_by_a_pass_an_error_cut_short_is_not_new_when_the_policy_goes(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    # Generation 2 is allowed, then its pass stops at an error (a webhook refusing the old
    # pod's deletion): its status keeps generation 1. The policy pruned meanwhile must not
    # withdraw a sandbox whose spec the policy already allowed.
    allow(emulator, images=["registry.example.com/craft/"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE))
    await ready(emulator, "alice")

    emulator.before_request.append(refuse_pod_deletion)  # type: ignore[arg-type]
    emulator.patch(
        SANDBOXES, NAMESPACE, "alice", {"spec": {"resources": {"limits": {"memory": "12Gi"}}}}
    )
    await event_posted(emulator, "alice", "ReconcileError")
    emulator.remove(POLICIES, None, POLICY_NAME)

    await event_posted(emulator, "alice", "PolicyMissing")
    assert children(emulator) == [name for _, name in CHILDREN]
    assert len(live_pats(settings)) == 1
    assert "AccessWithdrawn" not in await event_posted(emulator, "alice", "PolicyMissing")
    assert status(emulator, "alice")["observedGeneration"] == 1


async def test_a_sandbox_whose_spec_changes_while_the_policy_is_missing_is_judged_as_new(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    allow(emulator, images=["registry.example.com/craft/"])
    emulator.create(SANDBOXES, sandbox("alice", image=IMAGE))
    await ready(emulator, "alice")
    emulator.remove(POLICIES, None, POLICY_NAME)
    await event_posted(emulator, "alice", "PolicyMissing")

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"image": IMAGE + "-2"}})

    await refused(emulator, "alice")
    await eventually(lambda: children(emulator) == [], what="the children removed")
    assert live_pats(settings) == []
    assert condition(emulator, "alice", "PolicyEnforced") == {}


async def test_a_pat_minted_by_a_pass_killed_before_its_status_is_revoked_on_denial(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    """The pass minted, then died before its Secret or status said so; the platform then
    says no. Nothing in the cluster shows the PAT, yet a sandbox that had a pass before
    may have one: it is revoked, not left live until the sandbox is deleted."""
    reached, release = asyncio.Event(), asyncio.Event()

    async def die_before_the_secret(request: rendering.Request) -> aiohttp.web.Response | None:
        if request.method.value.upper() == "POST" and request.url.path.endswith("/secrets"):
            reached.set()
            await release.wait()
            return aiohttp.web.Response(status=503, text="the operator died here")
        return None

    url = str(emulator.url).rstrip("/")
    emulator.before_request.append(die_before_the_secret)
    first = await start_operator(url, settings, exec_transport=pod_exec)
    emulator.create(SANDBOXES, sandbox("alice"))
    await asyncio.wait_for(reached.wait(), 10)
    await first.kill()
    emulator.before_request.remove(die_before_the_secret)
    release.set()
    assert len(live_pats(settings)) == 1  # minted, in no Secret, in no status

    emulator.label_namespace(NAMESPACE, {TENANT_LABEL: "acme"})
    second = await start_operator(url, settings, exec_transport=pod_exec)
    try:
        await phase(emulator, "alice", "Failed")
        await eventually(lambda: live_pats(settings) == [], what="the PAT revoked")
    finally:
        await second.stop()

"""No sandbox pod starts in a namespace where no NetworkPolicy restricts its egress.

Every other test's namespace gets the NetworkPolicies of ``manifests/sandbox-namespace``
(see ``conftest.emulator``); these start from a namespace without them.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.api.pool import LABEL_POOL
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, condition, event_posted, phase, pod, sandbox
from tests.support.emulator import OPERATOR_AGENTS, KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec
from tests.support.pools import POOLS, pool
from tests.support.sandbox_namespace import NETWORK_POLICIES, network_policies

SANDBOX_POLICY = "craft-sandbox-egress"


@pytest.fixture
def bare_namespace(emulator: KubeEmulator) -> str:
    """The test namespace, without the sandbox NetworkPolicies."""
    emulator.namespace_defaults.clear()
    return NAMESPACE


def policy(name: str = SANDBOX_POLICY) -> dict:
    """One of ``manifests/sandbox-namespace``'s NetworkPolicies, in the test namespace."""
    found = next(p for p in network_policies() if p["metadata"]["name"] == name)
    return {**copy.deepcopy(found), "metadata": {**found["metadata"], "namespace": NAMESPACE}}


async def test_without_an_egress_policy_no_pod_starts_and_the_sandbox_says_why(
    emulator: KubeEmulator, bare_namespace: str, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))

    await eventually(
        lambda: condition(emulator, "alice", "PodReady").get("reason") == "EgressNotRestricted",
        what="PodReady EgressNotRestricted",
    )
    ready = condition(emulator, "alice", "PodReady")
    assert ready["status"] == "False"
    assert (
        f"no NetworkPolicy in namespace {bare_namespace} restricts the egress" in ready["message"]
    )
    assert "manifests/sandbox-namespace" in ready["message"]
    assert "CRAFT_ALLOW_UNRESTRICTED_EGRESS" in ready["message"]
    await event_posted(emulator, "alice", "EgressNotRestricted")
    assert condition(emulator, "alice", "Ready")["status"] == "False"
    assert (emulator.get(SANDBOXES, NAMESPACE, "alice")["status"]["phase"]) == "Pending"
    # Not a hot loop: it waits for a NetworkPolicy, it does not retry.
    before = operator.queue.processed + operator.queue.failed
    await asyncio.sleep(1.0)
    assert operator.queue.processed + operator.queue.failed - before <= 1
    assert pod(emulator, "alice") is None


async def test_the_pod_starts_once_a_policy_restricts_its_egress(
    emulator: KubeEmulator, bare_namespace: str, operator: OperatorContext
) -> None:
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(
        lambda: condition(emulator, "alice", "PodReady").get("reason") == "EgressNotRestricted",
        what="PodReady EgressNotRestricted",
    )
    # A policy that selects other pods, or governs ingress only, does not count.
    library = policy("craft-library-sync-egress")
    emulator.create(NETWORK_POLICIES, library)
    ingress_only = policy()
    ingress_only["metadata"]["name"] = "ingress-only"
    ingress_only["spec"] = {"podSelector": {}, "policyTypes": ["Ingress"]}
    emulator.create(NETWORK_POLICIES, ingress_only)
    await asyncio.sleep(0.5)
    assert pod(emulator, "alice") is None

    emulator.create(NETWORK_POLICIES, policy())

    # Woken by the NetworkPolicy's watch event: well before the resync interval (300 s).
    await eventually(lambda: pod(emulator, "alice"), what="the pod once the policy exists")
    await phase(emulator, "alice", "Provisioning")


def pool_pods(emulator: KubeEmulator) -> list[dict[str, Any]]:
    """The pods of the pool ``warm``."""
    return [
        found
        for found in emulator.list("v1/pods", NAMESPACE)
        if (found["metadata"].get("labels") or {}).get(LABEL_POOL) == "warm"
    ]


def pool_egress(emulator: KubeEmulator) -> dict[str, Any]:
    """The ``EgressRestricted`` condition of the pool ``warm`` (empty before it has one)."""
    status = emulator.get(POOLS, NAMESPACE, "warm").get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "EgressRestricted"), {})


async def test_a_pool_waiting_for_an_egress_policy_fills_once_one_restricts_its_pods(
    emulator: KubeEmulator, bare_namespace: str, operator: OperatorContext
) -> None:
    emulator.create(
        POOLS, {**pool("warm", replicas=1), "metadata": {"name": "warm", "namespace": NAMESPACE}}
    )

    await eventually(
        lambda: pool_egress(emulator).get("status") == "False", what="EgressRestricted False"
    )
    assert pool_pods(emulator) == []

    emulator.create(NETWORK_POLICIES, policy())

    # Woken by the NetworkPolicy's watch event: well before the resync interval (300 s).
    await eventually(lambda: pool_pods(emulator), what="the pool's pod once the policy exists")


async def test_a_platform_policy_of_its_own_that_restricts_all_pods_egress_counts(
    emulator: KubeEmulator, bare_namespace: str, operator: OperatorContext
) -> None:
    deny_all = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": NAMESPACE},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    emulator.create(NETWORK_POLICIES, deny_all)

    emulator.create(SANDBOXES, sandbox("alice"))

    await eventually(lambda: pod(emulator, "alice"), what="the pod")


async def test_with_unrestricted_egress_allowed_the_pod_starts_without_a_policy(
    emulator: KubeEmulator, bare_namespace: str, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    allowed = settings.model_copy(update={"allow_unrestricted_egress": True})
    async with running_operator(str(emulator.url).rstrip("/"), allowed, exec_transport=pod_exec):
        emulator.create(SANDBOXES, sandbox("alice"))

        await eventually(lambda: pod(emulator, "alice"), what="the pod")
    assert emulator.list(NETWORK_POLICIES, NAMESPACE) == []


async def refuse_network_policies(request: rendering.Request) -> aiohttp.web.Response | None:
    """The operator's Role in the namespace lost list/watch on networkpolicies."""
    if "/networkpolicies" in request.url.path and request.headers.get("User-Agent", "").startswith(
        OPERATOR_AGENTS
    ):
        body = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "forbidden"}
        return aiohttp.web.json_response(body, status=403)
    return None


async def network_policies_unwatchable(emulator: KubeEmulator, operator: OperatorContext) -> None:
    await eventually(lambda: not operator.gate.priming, what="the first listing done")
    emulator.before_request.append(refuse_network_policies)
    emulator.cut_watches()
    await eventually(
        lambda: operator.kube.watch_outcomes[("networkpolicies", "failing")] > 0,
        what="the NetworkPolicy stream failing",
    )


async def test_no_pod_starts_while_the_network_policies_cannot_be_watched(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The operator's view would keep a policy deleted meanwhile: a pod started in a
    namespace with no NetworkPolicy at all, Ready, nothing said."""
    await network_policies_unwatchable(emulator, operator)
    for policy in emulator.list(NETWORK_POLICIES, NAMESPACE):
        emulator.remove(NETWORK_POLICIES, NAMESPACE, policy["metadata"]["name"])

    emulator.create(SANDBOXES, sandbox("alice"))

    said = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "PodReady")).get("reason") == "EgressUnverified"
            and c
        ),
        what="EgressUnverified",
    )
    assert "cannot watch the NetworkPolicies" in said["message"]
    assert pod(emulator, "alice") is None


async def test_once_the_network_policies_can_be_watched_again_the_waiting_pod_starts(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The policies never changed: the stream's new list brings no news, and only its
    recovery wakes the sandbox that waited on it."""
    await network_policies_unwatchable(emulator, operator)
    emulator.create(SANDBOXES, sandbox("alice"))
    await eventually(
        lambda: condition(emulator, "alice", "PodReady").get("reason") == "EgressUnverified",
        what="EgressUnverified",
    )

    emulator.before_request.remove(refuse_network_policies)

    await eventually(lambda: pod(emulator, "alice"), what="the pod", within=30)


async def test_once_the_network_policies_can_be_watched_again_the_waiting_pool_fills(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """As the sandbox above: the stream's recovery, not a change, wakes the pool."""
    await network_policies_unwatchable(emulator, operator)
    emulator.create(
        POOLS, {**pool("warm", replicas=1), "metadata": {"name": "warm", "namespace": NAMESPACE}}
    )
    await eventually(
        lambda: pool_egress(emulator).get("reason") == "EgressUnverified",
        what="EgressRestricted EgressUnverified",
    )
    assert pool_pods(emulator) == []

    emulator.before_request.remove(refuse_network_policies)

    await eventually(lambda: pool_pods(emulator), what="the pool's pod", within=30)

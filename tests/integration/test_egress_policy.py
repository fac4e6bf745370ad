"""No sandbox pod starts in a namespace where no NetworkPolicy restricts its egress.

Every other test's namespace gets the NetworkPolicies of ``manifests/sandbox-namespace``
(see ``conftest.emulator``); these start from a namespace without them.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, condition, event_posted, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec
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

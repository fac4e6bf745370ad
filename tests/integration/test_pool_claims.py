"""Sandboxes claim warm pods through the operator's loop: Ready on a pod of the pool with the
token and SKILL.md delivered, the pool refilled behind them, and none shared."""

from __future__ import annotations

import asyncio

from craft_operator.api.pool import LABEL_CLAIMED_FROM
from craft_operator.context import OperatorContext
from craft_operator.kube.kinds import LABEL_MANAGED_BY
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, event_posted, pod, sandbox, status
from tests.integration.test_pools import NAME, full
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec
from tests.support.pools import POOLS, pool


async def test_sandboxes_naming_a_pool_are_ready_on_its_pods_and_the_pool_refills(
    emulator: KubeEmulator, operator: OperatorContext, pod_exec: EmulatedPodExec
) -> None:
    emulator.create(
        POOLS, {**pool(NAME, replicas=2), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 2)
    names = ["alice", "bob", "carol"]
    for name in names:
        emulator.create(SANDBOXES, sandbox(name, poolRef={"name": NAME}))
    await eventually(
        lambda: sum(status(emulator, n).get("phase") == "Ready" for n in names) >= 2,
        what="two sandboxes Ready on warm pods",
    )

    claimed = {}
    for name in names:
        pod_name = status(emulator, name).get("podName")
        if status(emulator, name).get("claimedFrom") == NAME:
            claimed[name] = pod_name
    assert len(claimed) >= 2, "the two warm pods went to two sandboxes"
    assert len(set(claimed.values())) == len(claimed), "never one pod for two sandboxes"
    for name, pod_name in claimed.items():
        taken = emulator.get("v1/pods", NAMESPACE, pod_name)
        assert taken["metadata"]["labels"][LABEL_CLAIMED_FROM] == NAME
        [owner] = taken["metadata"]["ownerReferences"]
        assert owner["name"] == name
        files = pod_exec.local.workspace(NAMESPACE, pod_name) / "skills" / "company-search"
        assert (files / "SKILL.md").read_text().startswith("---\nname: company-search\n")
        assert (pod_exec.local.credentials_dir(NAMESPACE, pod_name) / "pat").exists()
    late = next(name for name in names if name not in claimed)
    await event_posted(emulator, late, "ColdStart")
    assert pod(emulator, late) is not None, "the one without a warm pod started cold"
    await full(emulator, 2, claimed=2)
    registry = operator.services.metrics.registry
    where = {"namespace": NAMESPACE, "pool": NAME}
    assert registry.get_sample_value("craft_pool_claims_total", where) == 2
    assert registry.get_sample_value("craft_pool_claim_duration_seconds_count", where) == 2
    cold = sum(
        registry.get_sample_value("craft_pool_cold_starts_total", {**where, "reason": reason}) or 0
        for reason in ("PoolEmpty", "ClaimConflict")
    )
    assert cold >= 1


async def test_a_sandbox_writing_the_pools_memory_in_bytes_claims_its_pod(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """``4 * 1024**3`` from a Python backend is the pool's ``4Gi``: the same pod."""
    memory = {"requests": {"memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    in_bytes = {"requests": {"memory": "4294967296"}, "limits": {"memory": "4294967296"}}
    emulator.create(
        POOLS,
        {
            **pool(NAME, replicas=1, resources=memory),
            "metadata": {"name": NAME, "namespace": NAMESPACE},
        },
    )
    await full(emulator, 1)
    emulator.create(SANDBOXES, sandbox("alice", poolRef={"name": NAME}, resources=in_bytes))
    await eventually(lambda: status(emulator, "alice").get("claimedFrom"), what="the claim")
    assert status(emulator, "alice")["claimedFrom"] == NAME


async def test_a_claimed_pod_whose_managed_by_label_was_removed_is_kept_not_doubled(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    """The watches select by that label: the API server tells them the claimed pod was
    deleted while it runs on, with the user's token and files. It is read back by the
    name the status recorded and relabelled; no second pod is claimed or made beside it."""
    emulator.create(
        POOLS, {**pool(NAME, replicas=1), "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    await full(emulator, 1)
    emulator.create(SANDBOXES, sandbox("alice", poolRef={"name": NAME}))
    await eventually(lambda: status(emulator, "alice").get("phase") == "Ready", what="Ready")
    claimed = status(emulator, "alice")["podName"]
    first = emulator.get("v1/pods", NAMESPACE, claimed)
    await full(emulator, 1, claimed=1)

    emulator.patch(
        "v1/pods", NAMESPACE, claimed, {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )

    relabelled = await eventually(
        lambda: (emulator.get("v1/pods", NAMESPACE, claimed)["metadata"].get("labels") or {}).get(
            LABEL_MANAGED_BY
        ),
        what="the label put back",
    )
    assert relabelled == "craft-operator"
    await asyncio.sleep(1.0)  # room for a second claim to show
    assert (
        emulator.get("v1/pods", NAMESPACE, claimed)["metadata"]["uid"] == first["metadata"]["uid"]
    )
    assert status(emulator, "alice")["podName"] == claimed
    assert status(emulator, "alice")["phase"] == "Ready"
    assert pod(emulator, "alice") is None, "no cold pod beside it"
    await full(emulator, 1, claimed=1)

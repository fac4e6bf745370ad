"""The pod_ready step's duration: a pod's creation to Ready, for the pods the operator makes
for a sandbox; a claimed warm pod's age is the time it waited in its pool, not a start."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from craft_operator.reconciler.step import Memory, Pass
from craft_operator.reconciler.steps import credentials, pod
from craft_operator.status import format_time
from tests.support.pod_exec import mark_pod_running
from tests.support.pools import declare_pool_resource
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, NOW, World
from tests.unit.reconciler.steps.test_claim import POOL, warm_pods

pytestmark = pytest.mark.unit


async def pod_pass(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    await credentials.ensure_pat(p)
    return p


def sample(world: World, name: str, **labels: str) -> float:
    found = world.services.metrics.registry.get_sample_value(name, labels)
    assert found is not None, name
    return found


def pod_ready_count(world: World) -> float:
    return sample(world, "craft_provisioning_phase_duration_seconds_count", phase="pod_ready")


def created_before(world: World, name: str, age: timedelta) -> None:
    """The watch delivers the pod as created ``age`` before the pass's now."""
    body = world.emulator.get("v1/pods", NAMESPACE, name)
    body["metadata"]["creationTimestamp"] = format_time(NOW - age)
    world.cache.put("Pod", body)


def pod_ready_waiting(*, since: datetime) -> dict[str, str]:
    """PodReady as a pass stopped before the pod's row left it (the database down)."""
    return {
        "type": "PodReady",
        "status": "Unknown",
        "reason": "WaitingForCredentials",
        "message": "waiting for an earlier step",
        "lastTransitionTime": format_time(since),
    }


async def test_a_pod_made_for_the_sandbox_is_timed_from_its_creation_to_ready(
    world: World,
) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    created_before(world, NAME, timedelta(seconds=42))

    assert await pod.converge_pod(await pod_pass(world)) is None

    assert pod_ready_count(world) == 1
    assert sample(world, "craft_provisioning_phase_duration_seconds_sum", phase="pod_ready") == 42


async def test_a_claimed_warm_pod_is_not_timed_by_its_days_in_the_pool(world: World) -> None:
    declare_pool_resource(world.emulator)
    [warm] = warm_pods(world, 1)
    created_before(world, warm, timedelta(days=3))

    p = await pod_pass(world, spec={"poolRef": {"name": POOL}})
    assert await pod.converge_pod(p) is None
    assert p.run.status.claimed_from == POOL

    assert pod_ready_count(world) == 0
    where = {"namespace": NAMESPACE, "pool": POOL}
    assert sample(world, "craft_pool_claim_duration_seconds_count", **where) == 1


async def test_a_pod_ready_before_a_database_outage_is_not_timed_again_after_it(
    world: World,
) -> None:
    """While the database was down, passes stopped before the pod's row and left PodReady
    Unknown; the pod Ready again after it is no new start (its age would be days)."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    created_before(world, NAME, timedelta(days=3))
    uid = world.emulator.get("v1/pods", NAMESPACE, NAME)["metadata"]["uid"]
    waiting = pod_ready_waiting(since=NOW - timedelta(minutes=5))

    p = await pod_pass(world, status={"podUID": uid, "conditions": [waiting]})
    assert await pod.converge_pod(p) is None

    assert pod_ready_count(world) == 0


async def test_a_new_pod_after_an_unknown_pod_ready_is_timed(world: World) -> None:
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    created_before(world, NAME, timedelta(seconds=30))
    waiting = pod_ready_waiting(since=NOW - timedelta(minutes=5))

    p = await pod_pass(world, status={"podUID": "an-earlier-pod", "conditions": [waiting]})
    assert await pod.converge_pod(p) is None

    assert pod_ready_count(world) == 1


async def test_a_pod_that_turned_ready_during_an_outage_is_timed_until_its_own_ready(
    world: World,
) -> None:
    """PodReady went Unknown over a pod still starting; the pod says it turned Ready after
    that: its first Ready, timed to the moment it says, not to the pass after the outage."""
    await pod.converge_pod(await pod_pass(world))
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    body = world.emulator.get("v1/pods", NAMESPACE, NAME)
    body["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(minutes=30))
    for condition in body["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition["lastTransitionTime"] = format_time(NOW - timedelta(minutes=29))
    world.cache.put("Pod", body)
    waiting = pod_ready_waiting(since=NOW - timedelta(minutes=29, seconds=30))

    p = await pod_pass(world, status={"podUID": body["metadata"]["uid"], "conditions": [waiting]})
    assert await pod.converge_pod(p) is None

    assert pod_ready_count(world) == 1
    assert sample(world, "craft_provisioning_phase_duration_seconds_sum", phase="pod_ready") == 60


async def test_a_pod_whose_ready_status_was_not_written_is_timed_once(world: World) -> None:
    """The pass that saw the pod Ready could not write its status (a 5xx, a timeout, an
    object too large): the retry finds PodReady not True over the same pod, as before."""
    memory = Memory()
    first = await pod_pass(world, memory=memory)
    await pod.converge_pod(first)
    starting = first.run.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    created_before(world, NAME, timedelta(seconds=42))

    for after in (0, 2):  # the pass that sees it Ready, then its retry over the same status
        p = await pod_pass(
            world, memory=memory, status=starting, now=NOW + timedelta(seconds=after)
        )
        assert await pod.converge_pod(p) is None

    assert pod_ready_count(world) == 1
    assert sample(world, "craft_provisioning_phase_duration_seconds_sum", phase="pod_ready") == 42

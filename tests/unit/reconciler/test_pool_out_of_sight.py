"""A pool pod its watches lost sight of (its labels edited: the API server reports that as
a deletion while it runs on) is read on the pool's next pass and deleted if it is still the
pool's own, unclaimed and not being deleted; never a claimed pod, never twice."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from craft_operator.kube.client import ApiError
from tests.support.faults import failure_response
from tests.unit.reconciler.test_pool import KEY, NAMESPACE, PoolWorld, make_world  # noqa: F401

pytestmark = pytest.mark.unit


def deleted(world: PoolWorld, name: str) -> bool:
    """Whether the pod is gone or being deleted (a running pod goes after its grace)."""
    found = world.emulator.find("v1/pods", NAMESPACE, name)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


async def a_full_pool(make_world: Callable[..., PoolWorld]) -> PoolWorld:  # noqa: F811
    world = make_world()
    await world.filled(replicas=2)
    await world.pass_()
    return world


async def test_a_pod_out_of_sight_is_deleted_and_said_once(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    world.reconciler.out_of_sight.note(KEY, lost)

    await world.pass_()
    await world.pass_()

    assert deleted(world, lost)
    assert world.events.reasons.count("PoolPodOutOfSight") == 1


async def test_a_pod_claimed_meanwhile_is_left_to_its_sandbox(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    taken = world.unclaimed()[0]["metadata"]["name"]
    world.claim(taken)
    world.reconciler.out_of_sight.note(KEY, taken)

    await world.pass_()

    assert not deleted(world, taken)
    assert "PoolPodOutOfSight" not in world.events.reasons


async def test_a_pod_already_gone_costs_one_read(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    world.reconciler.out_of_sight.note(KEY, "warm-gone")
    since = len(world.emulator.served)

    await world.pass_()

    reads = [r for r in world.emulator.served[since:] if r.url.path.endswith("/warm-gone")]
    assert len(reads) == 1
    assert "PoolPodOutOfSight" not in world.events.reasons


async def test_a_read_that_fails_is_tried_again_on_the_retry(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    world.reconciler.out_of_sight.note(KEY, lost)
    refused = failure_response(503, "ServiceUnavailable", "etcd is slow")
    world.emulator.before_request.append(
        lambda request: refused if request.url.path.endswith(f"/{lost}") else None
    )

    with pytest.raises(ApiError):
        await world.pass_()
    world.emulator.before_request.clear()
    await world.pass_()

    assert deleted(world, lost)

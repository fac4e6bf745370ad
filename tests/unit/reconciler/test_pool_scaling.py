"""A pool follows its ``replicas`` down (``kubectl scale``, a HorizontalPodAutoscaler or
KEDA) whatever else holds its pods back: a spec or operator settings that make no pod, a
quota's refusals, pods that ended. What it says in its ``Ready`` condition is about the
pods it is short of, and the backoffs it keeps are of refusals that still mean something."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from craft_operator.kube.client import ApiError
from tests.support.pod_exec import mark_pod_running
from tests.unit.reconciler.test_pool import (  # noqa: F401
    NAMESPACE,
    START,
    PoolWorld,
    a_pass_over_quota,
    fail,
    make_world,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def world(make_world: Callable[..., PoolWorld]) -> PoolWorld:  # noqa: F811
    return make_world()


#: A GPU request without its limit: the CRD admits it, the operator makes no pod of it.
GPU_WITHOUT_LIMIT = {"requests": {"nvidia.com/gpu": "1"}}


# -- while no pod can be made --------------------------------------------------------------


async def test_a_pool_whose_spec_makes_no_pod_still_scales_to_zero(world: PoolWorld) -> None:
    await world.filled(replicas=5)
    await world.pass_()
    world.set_spec(resources=GPU_WITHOUT_LIMIT)
    await world.pass_()
    assert world.condition("Ready")["reason"] == "InvalidResources"

    world.set_spec(replicas=0)  # kubectl scale, or an autoscaler's scale to zero
    await world.pass_()

    assert world.unclaimed() == []
    assert world.status()["replicas"] == 0
    assert world.condition("Ready")["reason"] == "InvalidResources"
    assert "PoolScaledDown" in world.events.steps


async def test_a_pool_whose_settings_make_no_pod_still_scales_down(world: PoolWorld) -> None:
    await world.filled(replicas=3)
    await world.pass_()
    world.services.settings = world.services.settings.model_copy(update={"server_url": None})

    world.set_spec(replicas=1)
    await world.pass_()

    assert len(world.unclaimed()) == 1
    assert (world.status()["replicas"], world.status()["ready"]) == (1, 1), "still claimable"
    assert world.condition("Ready")["reason"] == "NoServerURL"


async def test_a_pool_whose_spec_makes_no_pod_says_so_though_its_pods_cannot_be_deleted(
    world: PoolWorld,
) -> None:
    """The scale-down is tried first; an admission webhook refusing pod deletes must not
    keep the pool from saying what it cannot do."""
    await world.filled(replicas=3)
    await world.pass_()

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise ApiError(403, "Forbidden", "admission webhook denied the request")

    world.services.kube.delete = refused  # type: ignore[method-assign]
    world.set_spec(resources=GPU_WITHOUT_LIMIT, replicas=1)
    await world.pass_()

    assert world.condition("Ready")["reason"] == "InvalidResources"
    assert len(world.unclaimed()) == 3


async def test_a_pool_whose_spec_makes_no_pod_deletes_its_ended_pods_and_makes_none(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=3)
    await world.pass_()
    world.set_spec(resources=GPU_WITHOUT_LIMIT)
    await world.pass_()
    ended = world.unclaimed()[0]["metadata"]["name"]
    fail(world, ended)

    await world.pass_()

    assert ended not in {pod["metadata"]["name"] for pod in world.pods()}
    assert len(world.unclaimed()) == 2, "not replaced: the spec makes no pod"
    assert world.status()["replicas"] == 2


async def test_a_spec_the_operator_cannot_read_still_scales_down(world: PoolWorld) -> None:
    """An object written under an older CRD, say (the emulator admits what the operator's
    model does not): its replicas are read alone."""
    await world.filled(replicas=3)
    await world.pass_()
    world.set_spec(image=5)
    await world.pass_()
    assert world.condition("Ready")["reason"] == "InvalidSpec"

    world.set_spec(replicas=1)
    await world.pass_()

    assert len(world.unclaimed()) == 1
    assert world.status()["replicas"] == 1


async def test_a_replicas_the_operator_cannot_read_scales_nothing_down_but_ended_pods_go(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=3)
    await world.pass_()
    world.set_spec(replicas="two")
    ended = world.unclaimed()[0]["metadata"]["name"]
    fail(world, ended)

    await world.pass_()

    assert world.condition("Ready")["reason"] == "InvalidSpec"
    assert ended not in {pod["metadata"]["name"] for pod in world.pods()}
    assert len(world.unclaimed()) == 2


# -- what Ready says after a scale-down --------------------------------------------------


async def test_a_pool_scaled_down_below_what_a_quota_refused_says_it_fills_not_that_creates_fail(
    world: PoolWorld,
) -> None:
    """An autoscaler scales up past the quota, then back down below what exists: no pod is
    needed, so the refusal's backoff is no reason the pool is not Ready."""
    world.create_pool(replicas=4)
    await world.pass_()
    world.set_spec(replicas=8)
    await a_pass_over_quota(world)
    assert world.condition("Ready")["reason"] == "PodCreateFailed"

    world.set_spec(replicas=2)
    await world.pass_()

    assert len(world.unclaimed()) == 2
    assert world.condition("Ready")["reason"] == "Filling"


async def test_a_pool_scaled_down_to_the_pods_a_failure_left_does_not_say_pods_are_failing(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=4)
    await world.pass_()
    pods = [pod["metadata"]["name"] for pod in world.unclaimed()]
    for name in pods[:2]:
        fail(world, name)  # a node drained
    mark_pod_running(world.emulator, NAMESPACE, pods[2], ready=False)
    await world.pass_()
    assert world.condition("Ready")["reason"] == "PoolPodsFailing"

    world.set_spec(replicas=2)  # the two left are all the autoscaler wants
    await world.pass_()

    ready = world.condition("Ready")
    assert len(world.unclaimed()) == 2
    assert ready["reason"] == "Filling", ready["message"]
    assert "new ones start after" not in ready["message"]


async def test_a_pool_still_short_of_pods_after_a_scale_down_still_says_the_refusal(
    world: PoolWorld,
) -> None:
    world.create_pool(replicas=4)
    await a_pass_over_quota(world)

    world.set_spec(replicas=2)
    await world.pass_()

    assert world.unclaimed() == []
    assert world.condition("Ready")["reason"] == "PodCreateFailed"


# -- the refusals a pool remembers -----------------------------------------------------------


async def refused_at(world: PoolWorld, *seconds: int) -> None:
    """Passes whose creates a quota refuses, at these seconds after START (each after the
    backoff of the one before); creates are allowed again after them."""
    for at in seconds:
        world.now[0] = START + timedelta(seconds=at)
        await a_pass_over_quota(world)


async def test_a_scale_up_after_a_scale_down_that_freed_quota_is_not_held_by_old_refusals(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=4)
    await world.pass_()
    world.set_spec(replicas=8)  # the autoscaler wants more than the quota allows
    await refused_at(world, 0, 11, 32, 73)  # the next try would be at 153 s
    world.now[0] = START + timedelta(seconds=80)
    world.set_spec(replicas=2)  # demand fell: two of the pool's pods go, freeing quota
    await world.pass_()
    assert len(world.unclaimed()) == 2

    world.now[0] = START + timedelta(seconds=85)
    world.set_spec(replicas=4)  # demand is back
    await world.pass_()

    assert len(world.unclaimed()) == 4


async def test_a_scale_down_that_deletes_no_pod_keeps_the_refusals_backoff(
    world: PoolWorld,
) -> None:
    """Nothing of the pool's went, so the quota has no more room than when it refused."""
    await world.filled(replicas=4)
    await world.pass_()
    world.set_spec(replicas=8)
    await refused_at(world, 0)
    world.set_spec(replicas=4)
    await world.pass_()

    world.now[0] = START + timedelta(seconds=5)
    world.set_spec(replicas=8)
    await world.pass_()

    assert len(world.unclaimed()) == 4, "the refusal's 10 s backoff still runs"


async def test_refusals_of_hours_ago_do_not_lengthen_a_new_refusals_backoff(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=4)
    await world.pass_()
    world.set_spec(replicas=8)
    await refused_at(world, 0, 11, 32, 73, 154)  # the backoff has doubled to 160 s
    world.set_spec(replicas=4)  # the autoscaler gives up; nothing is created for hours
    await world.pass_()

    world.now[0] = START + timedelta(hours=6)
    world.set_spec(replicas=6)  # a new peak, refused once
    await a_pass_over_quota(world)
    world.now[0] = START + timedelta(hours=6, seconds=11)  # the first backoff: 10 s
    await world.pass_()

    assert len(world.unclaimed()) == 6


async def test_a_scale_down_while_no_pod_can_be_made_frees_the_quota_for_the_next_scale_up(
    world: PoolWorld,
) -> None:
    await world.filled(replicas=4)
    await world.pass_()
    world.set_spec(replicas=8)
    await refused_at(world, 0)
    settings = world.services.settings
    world.services.settings = settings.model_copy(update={"server_url": None})
    world.set_spec(replicas=2)
    await world.pass_()
    assert len(world.unclaimed()) == 2

    world.services.settings = settings
    world.now[0] = START + timedelta(seconds=5)
    world.set_spec(replicas=4)
    await world.pass_()

    assert len(world.unclaimed()) == 4

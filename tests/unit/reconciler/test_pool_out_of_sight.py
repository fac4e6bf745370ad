"""A pool pod its watches lost sight of (its labels edited: the API server reports that as
a deletion while it runs on) is read on the pool's next pass and deleted if it is still the
pool's own, unclaimed and not being deleted; never a claimed pod, never twice. One whose
deletion is refused is tried on every pass and said when the refusal comes or changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from craft_operator.api.pool import LABEL_POOL
from craft_operator.kube import kinds
from tests.support.faults import failure_response
from tests.unit.reconciler.test_pool import (  # noqa: F401
    KEY,
    NAME,
    NAMESPACE,
    PoolWorld,
    make_world,
)

pytestmark = pytest.mark.unit


def deleted(world: PoolWorld, name: str) -> bool:
    """Whether the pod is gone or being deleted (a running pod goes after its grace)."""
    found = world.emulator.find("v1/pods", NAMESPACE, name)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def edit_label_away(world: PoolWorld, name: str) -> None:
    """Remove the pod's managed-by label: the watches, which select by it, are told the pod
    was deleted."""
    world.emulator.patch(
        "v1/pods", NAMESPACE, name, {"metadata": {"labels": {kinds.LABEL_MANAGED_BY: None}}}
    )


def lose_sight_of(world: PoolWorld, name: str) -> None:
    """:func:`edit_label_away`, and note the pod, as the children's handler does."""
    edit_label_away(world, name)
    world.reconciler.out_of_sight.note(KEY, name)


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
    lose_sight_of(world, lost)

    await world.pass_()
    await world.pass_()

    assert deleted(world, lost)
    assert world.events.reasons.count("PoolPodOutOfSight") == 1


async def test_a_pod_claimed_meanwhile_is_left_to_its_sandbox(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    taken = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, taken)
    world.claim(taken)

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


async def test_a_pod_that_fails_to_go_is_tried_again_and_the_pool_goes_on(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """A webhook refusing its deletion must not stop the pool (refills, status)."""
    world = await a_full_pool(make_world)
    stuck, other = (pod["metadata"]["name"] for pod in world.unclaimed())
    lose_sight_of(world, stuck)
    refused = failure_response(403, "Forbidden", "a webhook denied the deletion")

    async def deny(request: Any) -> Any:
        deleting = request.method.value.upper() == "DELETE"
        return refused if deleting and request.url.path.endswith(f"/{stuck}") else None

    world.emulator.before_request.append(deny)
    world.emulator.remove("v1/pods", NAMESPACE, other, grace_period_seconds=0)  # a node lost

    await world.pass_()

    assert not deleted(world, stuck)
    assert len([p for p in world.unclaimed() if p["metadata"]["name"] != stuck]) == 2
    world.emulator.before_request.clear()
    await world.pass_()
    assert deleted(world, stuck)


async def test_a_pod_claimed_between_its_read_and_its_delete_is_kept(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, lost)

    async def claim_first(request: Any) -> None:
        if request.method.value.upper() == "DELETE" and request.url.path.endswith(f"/{lost}"):
            world.claim(lost)  # the sandbox's claim wins the race to the pod

    world.emulator.before_request.append(claim_first)
    await world.pass_()

    assert not deleted(world, lost)


async def test_a_pod_back_in_sight_before_the_pass_is_kept(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """Its labels put back (a GitOps revert): the watches see it again, it is the pool's."""
    world = await a_full_pool(make_world)
    back = world.unclaimed()[0]["metadata"]["name"]
    world.reconciler.out_of_sight.note(KEY, back)  # noted, and in sight again

    await world.pass_()

    assert not deleted(world, back)
    assert "PoolPodOutOfSight" not in world.events.reasons


def out_of_sight_lists(world: PoolWorld) -> int:
    """The lists of pods the pool's label selects without the operator's."""
    return sum(
        1
        for request in world.emulator.served
        if request.method.value.upper() == "GET"
        and "managed-by!=" in request.url.query.get("labelSelector", "")
    )


async def test_a_pod_that_left_sight_before_this_activation_is_found_and_deleted(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """The event went with the process that saw it (a restart, a standby taking over)."""
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    edit_label_away(world, lost)
    await world.reconciler.forget_all()  # stood by; active again from the cluster's state

    await world.pass_()

    assert deleted(world, lost)
    assert world.events.reasons.count("PoolPodOutOfSight") == 1


async def test_pods_out_of_sight_are_listed_once_per_pool_and_activation(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    await world.pass_()
    assert out_of_sight_lists(world) == 1
    await world.reconciler.forget_all()
    await world.pass_()
    await world.pass_()
    assert out_of_sight_lists(world) == 2


@pytest.mark.parametrize(("status", "level"), [(503, "INFO"), (500, "WARNING")])
async def test_a_failed_list_of_pods_out_of_sight_is_tried_on_the_next_pass(
    make_world: Callable[..., PoolWorld],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    status: int,
    level: str,
) -> None:
    """Said on each pass it fails, as a warning unless the API server is away (then the
    pass's other requests meet it too, and one INFO line each is what the README says)."""
    caplog.set_level(logging.INFO)
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    edit_label_away(world, lost)
    await world.reconciler.forget_all()
    refused = failure_response(status, "Failing", "etcd is away")

    async def fail_the_list(request: Any) -> Any:
        wanted = "managed-by!=" in request.url.query.get("labelSelector", "")
        return refused if wanted else None

    world.emulator.before_request.append(fail_the_list)
    await world.pass_()
    assert not deleted(world, lost)
    said = [r.levelname for r in caplog.records if "pods out of sight not listed" in r.message]
    assert said == [level]
    world.emulator.before_request.clear()

    await world.pass_()

    assert deleted(world, lost)


def refuse_deleting(world: PoolWorld, name: str, answers: list[tuple[int, str]]) -> list[int]:
    """Answer each DELETE of pod ``name`` with the first of ``answers`` (status, reason),
    as an admission webhook or an API server away would; returns a list that grows by one
    per DELETE tried."""
    tried: list[int] = []

    async def refuse(request: Any) -> Any:
        if request.method.value.upper() != "DELETE" or not request.url.path.endswith(f"/{name}"):
            return None
        tried.append(1)
        status, reason = answers[0]
        return failure_response(status, reason, f"{reason}: the deletion of {name} was refused")

    world.emulator.before_request.append(refuse)
    return tried


def refusals_said(world: PoolWorld, caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """The Warning events and WARNING log lines that said a refused deletion."""
    events = world.events.reasons.count("PoolPodOutOfSightUndeletable")
    lines = [
        record
        for record in caplog.records
        if record.levelno >= logging.WARNING and "not deleted" in record.getMessage()
    ]
    return events, len(lines)


async def test_a_refused_deletion_is_said_once_on_the_pool_and_tried_on_every_pass(
    make_world: Callable[..., PoolWorld],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pool passes run on every pool pod event: a WARNING per pass would flood the log."""
    world = await a_full_pool(make_world)
    stuck = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, stuck)
    tried = refuse_deleting(world, stuck, [(403, "Forbidden")])
    caplog.set_level(logging.DEBUG)

    for _ in range(4):
        await world.pass_()

    assert not deleted(world, stuck)
    assert len(tried) == 4
    assert refusals_said(world, caplog) == (1, 1)
    said = next(m for t, r, m in world.events.posted if r == "PoolPodOutOfSightUndeletable")
    assert stuck in said
    assert "403 Forbidden" in said


async def test_a_refused_deletion_is_said_again_when_its_answer_changes(
    make_world: Callable[..., PoolWorld],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = await a_full_pool(make_world)
    stuck = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, stuck)
    answers = [(403, "Forbidden")]
    refuse_deleting(world, stuck, answers)
    caplog.set_level(logging.WARNING)
    await world.pass_()

    answers[0] = (400, "BadRequest")
    await world.pass_()
    await world.pass_()

    assert refusals_said(world, caplog) == (2, 2)
    assert "400 BadRequest" in world.events.posted[-1][2]


async def test_an_api_server_away_is_no_refusal_to_say(
    make_world: Callable[..., PoolWorld],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nor does it make the refusal said before new when the API server is back."""
    world = await a_full_pool(make_world)
    stuck = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, stuck)
    answers = [(503, "ServiceUnavailable")]
    refuse_deleting(world, stuck, answers)
    caplog.set_level(logging.WARNING)

    await world.pass_()
    assert refusals_said(world, caplog) == (0, 0)
    answers[0] = (403, "Forbidden")
    await world.pass_()
    answers[0] = (503, "ServiceUnavailable")
    await world.pass_()
    answers[0] = (403, "Forbidden")
    await world.pass_()

    assert not deleted(world, stuck)
    assert refusals_said(world, caplog) == (1, 1)


async def test_a_pod_back_in_sight_is_forgotten_and_said_anew_when_refused_again(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """What was said of a pod goes with it: deleted, back in sight, or its pool gone."""
    world = await a_full_pool(make_world)
    stuck = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, stuck)
    refuse_deleting(world, stuck, [(403, "Forbidden")])
    await world.pass_()
    world.emulator.patch(
        "v1/pods",
        NAMESPACE,
        stuck,
        {"metadata": {"labels": {kinds.LABEL_MANAGED_BY: kinds.MANAGED_BY}}},
    )
    await world.pass_()  # back in sight: the pool's again

    lose_sight_of(world, stuck)
    await world.pass_()

    assert world.events.reasons.count("PoolPodOutOfSightUndeletable") == 2


async def test_what_was_said_of_a_pool_goes_with_the_pool(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """A pool recreated under its name is told of the refusal again."""
    world = await a_full_pool(make_world)
    stuck = world.unclaimed()[0]["metadata"]["name"]
    lose_sight_of(world, stuck)
    refuse_deleting(world, stuck, [(403, "Forbidden")])
    await world.pass_()

    world.reconciler.forget(KEY)
    lose_sight_of(world, stuck)
    await world.pass_()

    assert world.events.reasons.count("PoolPodOutOfSightUndeletable") == 2


def unlabel_from_pool(world: PoolWorld, name: str) -> None:
    """Remove the pod's pool label only (``kubectl label pod NAME craft.onyx.app/pool-``):
    the watches still see it, the pool no longer counts it."""
    world.emulator.patch("v1/pods", NAMESPACE, name, {"metadata": {"labels": {LABEL_POOL: None}}})


async def test_a_pod_whose_pool_label_was_edited_away_is_replaced_and_deleted(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    """No claim can take it and the pool no longer counts it: it would run beside the pod
    made in its place until the pool went."""
    world = await a_full_pool(make_world)
    lost = world.unclaimed()[0]["metadata"]["name"]
    unlabel_from_pool(world, lost)

    await world.pass_()

    assert deleted(world, lost)
    assert len(world.unclaimed()) == 2, "the pool made another in its place"
    assert world.events.reasons.count("PoolPodOutOfSight") == 1


async def test_a_pod_whose_pool_label_was_put_back_before_its_deletion_is_kept(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    back = world.unclaimed()[0]["metadata"]["name"]
    unlabel_from_pool(world, back)
    world.refresh()

    async def relabel_first(request: Any) -> None:
        if request.method.value.upper() == "GET" and request.url.path.endswith(f"/{back}"):
            world.emulator.patch(
                "v1/pods", NAMESPACE, back, {"metadata": {"labels": {LABEL_POOL: NAME}}}
            )

    world.emulator.before_request.append(relabel_first)
    await world.reconciler.reconcile(KEY)

    assert not deleted(world, back)


async def test_a_claimed_pod_is_never_taken_for_one_whose_pool_label_was_edited_away(
    make_world: Callable[..., PoolWorld],  # noqa: F811
) -> None:
    world = await a_full_pool(make_world)
    taken = world.unclaimed()[0]["metadata"]["name"]
    world.claim(taken)

    await world.pass_()

    assert not deleted(world, taken)
    assert "PoolPodOutOfSight" not in world.events.reasons

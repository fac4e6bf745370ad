"""The pure plan of a pool pass: how many pods to create and which to delete, and why."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.api.pool import LABEL_POOL_TEMPLATE_HASH
from craft_operator.reconciler.pool_plan import (
    ENDED,
    EXCESS,
    OUTDATED,
    Plan,
    claimed_since_update,
    plan,
    surge_for,
    view,
)

pytestmark = pytest.mark.unit

NEW, OLD = "new-hash", "old-hash"


def pod(name: str, template: str = NEW, *, ready: bool = True, phase: str = "Running") -> Any:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": f"2026-11-23T12:00:{name[-2:]}Z",
            "labels": {LABEL_POOL_TEMPLATE_HASH: template},
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def names(deleted: Any, why: str) -> list[str]:
    return [p["metadata"]["name"] for p, reason in deleted if reason == why]


def test_an_empty_pool_creates_up_to_the_bound() -> None:
    assert plan(view([], NEW), 25, max_creates=10).create == 10
    assert plan(view([], NEW), 3, max_creates=10).create == 3


def test_a_full_pool_does_nothing() -> None:
    todo = plan(view([pod("p-01"), pod("p-02")], NEW), 2, max_creates=10)
    assert (todo.create, todo.delete) == (0, ())


def test_ended_pods_go_even_when_nothing_may_be_created() -> None:
    pods = view([pod("p-01", phase="Failed"), pod("p-02")], NEW)
    todo = plan(pods, 2, max_creates=10, may_create=False)
    assert names(todo.delete, ENDED) == ["p-01"]
    assert todo.create == 0


def test_a_plan_says_how_many_pods_the_pool_lacks_whatever_holds_creates_back() -> None:
    pods = view([pod("p-01")], NEW)
    assert plan(pods, 25, max_creates=10).short == 24
    assert plan(pods, 3, max_creates=10, may_create=False).short == 2
    assert plan(pods, 1, max_creates=10).short == 0
    assert plan(view([pod("p-01"), pod("p-02")], NEW), 1, max_creates=10).short == 0


def test_a_large_pool_updates_a_tenth_at_a_time() -> None:
    assert surge_for(3) == 1
    assert surge_for(100) == 10
    old = [pod(f"p-{i:02d}", OLD) for i in range(100)]
    todo = plan(view(old, NEW), 100, max_creates=50)
    assert todo.create == 10
    assert todo.delete == ()


def test_old_pods_that_are_not_ready_go_at_once() -> None:
    pods = view([pod("p-01", OLD, ready=False), pod("p-02", OLD)], NEW)
    todo = plan(pods, 2, max_creates=10)
    assert names(todo.delete, OUTDATED) == ["p-01"]
    assert todo.create == 2  # one to replace it, one surge


def test_an_old_ready_pod_goes_once_a_new_one_is_ready_oldest_first() -> None:
    pods = view([pod("p-01", OLD), pod("p-02", OLD), pod("p-03")], NEW)
    todo = plan(pods, 2, max_creates=10)
    assert names(todo.delete, OUTDATED) == ["p-01"]
    assert todo.create == 1


def test_scaling_to_zero_deletes_everything() -> None:
    pods = view([pod("p-01", OLD), pod("p-02"), pod("p-03", ready=False)], NEW)
    todo = plan(pods, 0, max_creates=10)
    assert sorted(names(todo.delete, OUTDATED) + names(todo.delete, EXCESS)) == [
        "p-01",
        "p-02",
        "p-03",
    ]
    assert todo.create == 0


def test_scaling_down_deletes_the_not_ready_then_the_newest() -> None:
    pods = view([pod("p-01"), pod("p-02"), pod("p-03"), pod("p-04", ready=False)], NEW)
    assert names(plan(pods, 2, max_creates=10).delete, EXCESS) == ["p-04", "p-03"]


def test_new_pods_claimed_during_an_update_retire_as_many_old_ready_ones() -> None:
    # Every new pod was claimed as soon as it was Ready: none is left unclaimed, yet the
    # sandboxes chose them over the old ones, which no claim wants.
    old = [pod(f"p-{i:02d}", OLD) for i in range(10)]
    starting = [pod("p-40", ready=False)]
    claimed = [pod(f"p-{i:02d}") for i in (30, 31, 32)]
    pods = view([*old, *starting], NEW)
    assert claimed_since_update(claimed, pods, NEW) == 3
    stalled = plan(pods, 10, max_creates=10)
    assert stalled.delete == ()
    todo = plan(pods, 10, max_creates=10, claimed_since_update=3)
    assert names(todo.delete, OUTDATED) == ["p-00", "p-01", "p-02"]
    assert todo.create == 3


def test_claims_before_the_update_or_of_another_template_retire_nothing() -> None:
    old = [pod(f"p-{i:02d}", OLD) for i in range(20, 30)]
    earlier = [pod("p-05"), pod("p-06")]  # claimed before the old pods were made
    other = [pod("p-35", "third-hash")]
    assert claimed_since_update([*earlier, *other], view(old, NEW), NEW) == 0
    assert claimed_since_update([pod("p-35")], view([pod("p-36")], NEW), NEW) == 0, "no update"


def test_a_pod_not_as_built_does_not_hold_an_update_for_ever() -> None:
    # It counts towards replicas, as it does once the update is over; never Ready, it must
    # not keep every old pod waiting for a replacement that never comes.
    old = [pod("p-01", OLD), pod("p-02", OLD)]
    forged = pod("p-05")
    forged["metadata"]["uid"] = "forged-uid"
    pods = view([*old, pod("p-04"), forged], NEW, unlike={"forged-uid"})
    assert plan(pods, 3, max_creates=10).delete == ((old[0], OUTDATED),)
    later = view([old[1], pod("p-04"), pod("p-06"), forged], NEW, unlike={"forged-uid"})
    assert plan(later, 3, max_creates=10).delete == ((old[1], OUTDATED),)
    done = view([pod("p-04"), pod("p-06"), forged], NEW, unlike={"forged-uid"})
    assert plan(done, 3, max_creates=10) == Plan(), "as after any update: nothing to do"

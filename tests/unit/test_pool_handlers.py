"""Pool wiring: a pool's events queue it on the pools' own queue, and a pod's event wakes the
pool it belongs to or was claimed from (which then refills), besides its sandbox."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL
from craft_operator.handlers import children, pools
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.reconciler.pool_out_of_sight import OutOfSight
from craft_operator.reconciler.queue import WorkQueue
from tests.support.queues import RecordingQueue

pytestmark = pytest.mark.unit


def memo() -> Any:
    reconciler = RecordingQueue()  # what it is told to forget
    reconciler.out_of_sight = OutOfSight()  # type: ignore[attr-defined]
    return SimpleNamespace(
        gate=SimpleNamespace(active=True),
        echo_check=lambda meta: lambda: False,  # no write of the operator's here
        cache=ObjectCache(),
        queue=RecordingQueue(),
        pool_queue=RecordingQueue(),
        pool_reconciler=reconciler,
    )


def pod(version: int, labels: dict[str, str], owner: str | None = None) -> dict[str, Any]:
    refs = [{"kind": "CraftSandbox", "name": owner, "uid": "u", "controller": True}]
    return {
        "metadata": {
            "name": "warm-abcde",
            "namespace": "team-a",
            "resourceVersion": str(version),
            "labels": labels,
            "ownerReferences": refs if owner else [],
        }
    }


async def test_a_pool_pod_event_queues_its_pool_and_no_sandbox() -> None:
    m = memo()
    children.on_child_event(m, kinds.POD.name, "ADDED", pod(1, {LABEL_POOL: "warm"}))
    assert m.pool_queue.added == [("team-a", "warm")]
    assert m.queue.added == []


async def test_a_pool_pod_whose_pool_label_went_still_wakes_the_pool_that_controls_it() -> None:
    """The pool no longer counts it: it must refill, and delete it, now, not at its resync."""
    m = memo()
    controlled = pod(1, {LABEL_POOL: "warm"})
    controlled["metadata"]["ownerReferences"] = [
        {"kind": "CraftSandboxPool", "name": "warm", "uid": "p", "controller": True}
    ]
    children.on_child_event(m, kinds.POD.name, "ADDED", controlled)
    controlled = {**controlled, "metadata": {**controlled["metadata"], "resourceVersion": "2"}}
    controlled["metadata"]["labels"] = {}
    m.pool_queue.added.clear()

    children.on_child_event(m, kinds.POD.name, "MODIFIED", controlled)

    assert m.pool_queue.added == [("team-a", "warm")]


async def test_a_pool_pod_reported_deleted_while_not_being_deleted_is_noted_for_its_pool() -> None:
    """Its labels were edited out of the watches' selector: the pool's pass reads it."""
    m = memo()
    children.on_child_event(m, kinds.POD.name, "ADDED", pod(1, {LABEL_POOL: "warm"}))
    children.on_child_event(m, kinds.POD.name, "DELETED", pod(2, {LABEL_POOL: "warm"}))
    assert m.pool_reconciler.out_of_sight.noted(("team-a", "warm")) == {"warm-abcde"}


async def test_a_pool_pod_deleted_through_the_api_server_is_not_noted() -> None:
    m = memo()
    deleted = pod(2, {LABEL_POOL: "warm"})
    deleted["metadata"]["deletionTimestamp"] = "2026-11-29T09:00:00Z"
    children.on_child_event(m, kinds.POD.name, "DELETED", deleted)
    assert m.pool_reconciler.out_of_sight.noted(("team-a", "warm")) == frozenset()
    assert m.pool_queue.added == [("team-a", "warm")]


async def test_a_claimed_pod_event_queues_its_sandbox_and_the_pool_it_left() -> None:
    m = memo()
    claimed = pod(2, {LABEL_CLAIMED_FROM: "warm"}, owner="alice")
    children.on_child_event(m, kinds.POD.name, "MODIFIED", claimed)
    assert m.queue.added == [("team-a", "alice")]
    assert m.pool_queue.added == [("team-a", "warm")]


async def test_the_echo_of_a_claim_still_wakes_the_pool_it_left() -> None:
    """The claim step caches the pod it claimed; the watch's echo of that write is no news
    to the sandbox, but it is the only word the pool gets that it must refill."""
    m = memo()
    claimed = pod(2, {LABEL_CLAIMED_FROM: "warm"}, owner="alice")
    m.cache.put(kinds.POD.name, claimed)
    children.on_child_event(m, kinds.POD.name, "MODIFIED", claimed)
    assert m.pool_queue.added == [("team-a", "warm")]
    assert m.queue.added == []


async def test_the_echo_of_a_pool_pod_write_wakes_nobody() -> None:
    m = memo()
    created = pod(1, {LABEL_POOL: "warm"})
    m.cache.put(kinds.POD.name, created)
    children.on_child_event(m, kinds.POD.name, "ADDED", created)
    assert m.pool_queue.added == []
    assert m.queue.added == []


async def test_a_deleted_pool_pod_wakes_its_pool() -> None:
    m = memo()
    children.on_child_event(m, kinds.POD.name, "DELETED", pod(3, {LABEL_POOL: "warm"}))
    assert m.pool_queue.added == [("team-a", "warm")]


async def test_pool_events_queue_the_pool_and_a_deleted_pool_is_visited_once_more() -> None:
    m = memo()
    body = {"metadata": {"name": "warm", "namespace": "team-a", "resourceVersion": "1"}}
    pools.on_pool_event(m, "ADDED", body)
    assert m.cache.get(kinds.POOL.name, "team-a", "warm") is not None
    pools.on_pool_event(m, "MODIFIED", body)  # an echo
    pools.on_pool_event(m, "DELETED", body)
    assert m.pool_queue.added == [("team-a", "warm"), ("team-a", "warm")]
    assert m.cache.get(kinds.POOL.name, "team-a", "warm") is None


async def test_a_pool_recreated_under_its_name_before_a_pass_saw_it_gone_starts_afresh() -> None:
    m = memo()
    old = {"metadata": {"name": "warm", "namespace": "team-a", "uid": "u1", "resourceVersion": "1"}}
    pools.on_pool_event(m, "ADDED", old)
    pools.on_pool_event(
        m, "MODIFIED", {**old, "metadata": {**old["metadata"], "resourceVersion": "2"}}
    )
    assert m.pool_reconciler.forgotten == []
    new = {"metadata": {"name": "warm", "namespace": "team-a", "uid": "u2", "resourceVersion": "9"}}
    pools.on_pool_event(m, "ADDED", new)  # its deletion unseen (a relist)
    assert m.pool_reconciler.forgotten == [("team-a", "warm")]
    assert m.pool_queue.forgotten == [("team-a", "warm")]
    assert m.pool_queue.added[-1] == ("team-a", "warm")


async def test_pod_events_wake_their_pool_a_moment_later_so_a_burst_costs_one_pass() -> None:
    """A claim and its refill bring several events of the pool's pods (claimed; created,
    scheduled, running, ready): each asks for the pass a moment later, and the queue
    merges the asks that wait, so a burst costs one pass over the pool's pods."""
    m = memo()
    claimed = pod(2, {LABEL_CLAIMED_FROM: "warm"}, owner="alice")
    children.on_child_event(m, kinds.POD.name, "MODIFIED", claimed)
    children.on_child_event(m, kinds.POD.name, "ADDED", pod(3, {LABEL_POOL: "warm"}))
    children.on_child_event(m, kinds.POD.name, "MODIFIED", pod(4, {LABEL_POOL: "warm"}))
    assert m.pool_queue.delays == [children.POOL_EVENT_DELAY] * 3
    assert m.queue.added == [("team-a", "alice")]

    body = {"metadata": {"name": "warm", "namespace": "team-a", "resourceVersion": "1"}}
    pools.on_pool_event(m, "ADDED", body)
    assert m.pool_queue.delays[-1] == 0.0  # a change of the pool itself: at once


async def test_asks_for_a_pass_that_wait_together_run_once() -> None:
    passes: list[tuple[str, str]] = []

    async def visit(key: tuple[str, str]) -> None:
        passes.append(key)

    queue: WorkQueue[tuple[str, str]] = WorkQueue(visit, concurrency=2)
    queue.start()
    try:
        for _ in range(5):
            queue.add(("team-a", "warm"), delay=children.POOL_EVENT_DELAY)
        await asyncio.sleep(children.POOL_EVENT_DELAY + 0.2)
    finally:
        await queue.stop()
    assert passes == [("team-a", "warm")]


def test_a_deletion_inferred_from_a_relist_wakes_the_owner_of_the_cached_copy() -> None:
    """A stream that missed events says DELETED with the name only; the owner and the pool
    are read from the copy in the cache."""
    m = memo()
    m.cache.put(kinds.POD.name, pod(2, {LABEL_CLAIMED_FROM: "warm"}, owner="alice"))
    gone = {"metadata": {"namespace": "team-a", "name": "warm-abcde", "resourceVersion": "9"}}

    children.on_child_event(m, kinds.POD.name, "DELETED", gone)

    assert m.cache.get(kinds.POD.name, "team-a", "warm-abcde") is None
    assert m.queue.added == [("team-a", "alice")]
    assert m.pool_queue.added == [("team-a", "warm")]


def test_a_deletion_inferred_from_a_list_older_than_the_cached_copy_is_no_deletion() -> None:
    """The operator wrote the pod after the stream's list was read: the list's DELETED is
    older than the cached copy, which stays, and nobody is woken."""
    m = memo()
    m.cache.put(kinds.POD.name, pod(2, {LABEL_CLAIMED_FROM: "warm"}, owner="alice"))
    before = {"metadata": {"namespace": "team-a", "name": "warm-abcde", "resourceVersion": "1"}}

    children.on_child_event(m, kinds.POD.name, "DELETED", before)

    assert m.cache.get(kinds.POD.name, "team-a", "warm-abcde") is not None
    assert m.queue.added == []
    assert m.pool_queue.added == []

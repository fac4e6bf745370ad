"""Sandbox wiring: a sandbox recreated under its name while its deletion went unseen (a
relist after the watch was down) starts afresh, inheriting no backoff or memory."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from craft_operator.handlers import sandbox
from craft_operator.kube.cache import ObjectCache
from craft_operator.metrics import Metrics
from craft_operator.metrics.recorder import SEEN_LIMIT
from craft_operator.reconciler.queue import WorkQueue
from tests.support.queues import RecordingQueue

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 12, 0, 0, 400_000, tzinfo=UTC)


def handler_memo(now: datetime = NOW) -> Any:
    """What the sandbox handler reads of the operator's context, recording."""
    return SimpleNamespace(
        gate=SimpleNamespace(active=True),
        echo_check=lambda meta: lambda: False,  # no write of the operator's here
        cache=ObjectCache(),
        queue=RecordingQueue(),
        reconciler=RecordingQueue(),
        services=SimpleNamespace(
            clock=lambda: now, metrics=Metrics(), credentials=RecordingQueue()
        ),
    )


def body(uid: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "alice", "namespace": "team-a", "uid": uid, "resourceVersion": version}
    }


def test_a_sandbox_recreated_under_its_name_inherits_nothing_of_the_old_one() -> None:
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u1", "1"))
    sandbox.on_sandbox_event(memo, "MODIFIED", body("u1", "2"))
    assert memo.reconciler.forgotten == []

    sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))

    assert memo.queue.forgotten == [("team-a", "alice")]
    assert memo.reconciler.forgotten == [("team-a", "alice")]
    assert memo.services.credentials.forgotten == ["u1"], "the old one's PAT is not kept"
    assert memo.queue.added[-1] == ("team-a", "alice")


def test_a_deletion_a_relist_inferred_forgets_the_sandboxs_pat() -> None:
    """A watch that relists says only which name is gone: the PAT kept in memory for the
    sandbox is dropped all the same (it is not left there until the orphan sweep)."""
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u1", "1"))
    gone = {"metadata": {"name": "alice", "namespace": "team-a"}}
    sandbox.on_sandbox_event(memo, "DELETED", gone)
    assert memo.services.credentials.forgotten == ["u1"]
    assert memo.reconciler.forgotten == [("team-a", "alice")]


def test_an_older_event_of_an_earlier_sandbox_of_the_name_forgets_nothing() -> None:
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))
    sandbox.on_sandbox_event(memo, "MODIFIED", body("u1", "2"))  # late, and older
    assert memo.reconciler.forgotten == []


def test_a_deleted_sandbox_leaves_the_work_queue_with_its_backoff() -> None:
    """No pass visits a sandbox that is gone, and one created again under its name does
    not wait out the old one's backoff (up to five minutes)."""
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u1", "1"))
    sandbox.on_sandbox_event(memo, "DELETED", body("u1", "2"))
    assert memo.queue.forgotten == [("team-a", "alice")]
    assert memo.reconciler.forgotten == [("team-a", "alice")]


def test_the_deletion_of_an_earlier_sandbox_seen_after_its_namesake_forgets_nothing() -> None:
    """The new sandbox keeps its pending visit, its memory and its PAT."""
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))
    sandbox.on_sandbox_event(memo, "DELETED", body("u1", "5"))  # late, and older
    assert memo.cache.get("CraftSandbox", "team-a", "alice") is not None
    assert memo.queue.forgotten == []
    assert memo.reconciler.forgotten == []
    assert memo.services.credentials.forgotten == []


def created(uid: str, at: str) -> dict[str, Any]:
    new = body(uid, "1")
    new["metadata"]["creationTimestamp"] = at
    return new


def test_a_sandbox_seen_within_the_second_of_its_creation_is_timed_from_that_moment() -> None:
    # creationTimestamp says 12:00:00; the watch brought it at 12:00:00.4, and a warm claim
    # is Ready well within a second: its time to Ready starts at 12:00:00.4, not 12:00:00.
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", created("u1", "2026-11-28T12:00:00Z"))
    sandbox.on_sandbox_event(memo, "MODIFIED", created("u1", "2026-11-28T12:00:00Z"))
    sandbox.on_sandbox_event(memo, "ADDED", created("u2", "2026-11-28T11:59:58Z"))  # a relist
    assert memo.services.metrics.take_seen("u1") == NOW
    assert memo.services.metrics.take_seen("u1") is None, "once"
    assert memo.services.metrics.take_seen("u2") is None


def test_a_sandbox_recreated_under_its_name_unseen_is_timed_from_the_moment_it_was_seen() -> None:
    """Its predecessor's deletion went unseen (a relist): the new sandbox is new all the
    same, and its time to Ready starts when it was seen, as any other's."""
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", created("u1", "2026-11-28T11:00:00Z"))
    recreated = created("u2", "2026-11-28T12:00:00Z")
    recreated["metadata"]["resourceVersion"] = "9"
    sandbox.on_sandbox_event(memo, "ADDED", recreated)
    assert memo.services.metrics.take_seen("u2") == NOW


@pytest.mark.parametrize("how", ["deleted", "recreated unseen"])
def test_a_sandbox_gone_before_it_was_ready_leaves_no_moment_behind(how: str) -> None:
    memo = handler_memo()
    sandbox.on_sandbox_event(memo, "ADDED", created("u1", "2026-11-28T12:00:00Z"))
    if how == "deleted":
        sandbox.on_sandbox_event(memo, "DELETED", created("u1", "2026-11-28T12:00:00Z"))
    else:
        sandbox.on_sandbox_event(memo, "ADDED", body("u2", "9"))
    assert memo.services.metrics.take_seen("u1") is None


def test_the_moments_remembered_are_bounded() -> None:
    metrics = Metrics()
    for index in range(SEEN_LIMIT + 10):
        metrics.saw_created(f"u{index}", NOW + timedelta(seconds=index))
    assert metrics.take_seen("u0") is None, "the oldest went first"
    assert metrics.take_seen(f"u{SEEN_LIMIT + 9}") is not None


@pytest.mark.parametrize("echo", [True, False], ids=["its own write", "news"])
async def test_an_event_during_a_pass_brings_another_only_if_it_is_not_the_passs_own_write(
    echo: bool,
) -> None:
    """The watch event of a pass's own status write often arrives before the write's
    answer: read back, it would cost a pass that finds nothing to do."""
    passes: list[tuple[str, str]] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def visit(key: tuple[str, str]) -> None:
        passes.append(key)
        started.set()
        await release.wait()

    memo = handler_memo()
    memo.queue = WorkQueue(visit, concurrency=1)
    memo.echo_check = lambda meta: lambda: echo
    memo.queue.start()
    try:
        sandbox.on_sandbox_event(memo, "ADDED", body("u1", "1"))
        await asyncio.wait_for(started.wait(), 5)
        sandbox.on_sandbox_event(memo, "MODIFIED", body("u1", "2"))
        release.set()
        await asyncio.sleep(0.2)
    finally:
        await memo.queue.stop()
    assert len(passes) == (1 if echo else 2)

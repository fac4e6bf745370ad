"""Specification of the library sync pool: bounded, never waited on, retried with backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from craft_operator.library import LibrarySyncError, SyncResult
from craft_operator.library.errors import ExecCommandFailedError, ExecTimedOutError
from craft_operator.reconciler.library_pool import POD_FAILURES, LibrarySyncPool, Outcome
from craft_operator.reconciler.queue import Backoff

RESULT = SyncResult(
    files=0,
    bytes=0,
    bytes_transferred=0,
    copied=0,
    deleted=0,
    skipped=(),
    excluded=0,
    duration_seconds=0.0,
)


def key(index: int) -> tuple[str, str]:
    return ("ns", f"sandbox-{index}")


async def test_no_more_syncs_run_at_once_than_the_pool_has_slots() -> None:
    pool = LibrarySyncPool(3)
    release = asyncio.Event()
    woken: list[tuple[str, str]] = []
    all_woken = asyncio.Event()

    def wake(which: tuple[str, str]) -> None:
        woken.append(which)
        if len(woken) == 10:
            all_woken.set()

    pool.wake = wake

    async def hanging() -> SyncResult:
        await release.wait()
        return RESULT

    for index in range(10):
        pool.submit(key(index), f"uid-{index}", "attempt", hanging)
    for _ in range(20):
        await asyncio.sleep(0)

    assert pool.running == 3
    assert all(pool.busy(key(index), f"uid-{index}") for index in range(10))
    release.set()
    await asyncio.wait_for(all_woken.wait(), 10)
    assert pool.peak == 3
    assert sorted(woken) == sorted(key(index) for index in range(10))
    outcome = pool.take(key(4), "uid-4")
    assert outcome is not None
    assert (outcome.attempt, outcome.result) == ("attempt", RESULT)
    assert pool.take(key(4), "uid-4") is None  # taken once


async def test_a_sync_already_running_for_a_sandbox_is_not_started_twice() -> None:
    pool = LibrarySyncPool(4)
    started = 0
    release = asyncio.Event()

    async def work() -> SyncResult:
        nonlocal started
        started += 1
        await release.wait()
        return RESULT

    pool.submit(key(1), "uid", "a", work)
    pool.submit(key(1), "uid", "b", work)
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.sleep(0.01)

    assert started == 1
    outcome = pool.take(key(1), "uid")
    assert outcome is not None
    assert outcome.attempt == "a"


async def test_an_outcome_belongs_to_the_sandbox_object_by_uid() -> None:
    pool = LibrarySyncPool(1)

    async def work() -> SyncResult:
        return RESULT

    pool.submit(key(1), "old-uid", "a", work)
    await asyncio.sleep(0.01)

    assert pool.take(key(1), "new-uid") is None


async def test_a_failure_that_may_pass_is_retried_after_a_growing_backoff() -> None:
    pool = LibrarySyncPool(1, backoff=Backoff(base=10.0, cap=300.0, jitter=0.0))

    async def timing_out() -> SyncResult:
        raise ExecTimedOutError("the upload did not finish within 60s")

    waits = []
    for _ in range(3):
        pool.submit(key(1), "uid", "a", timing_out)
        await asyncio.sleep(0.01)
        outcome = pool.take(key(1), "uid")
        assert outcome is not None
        assert outcome.error is not None
        assert outcome.error.reason == "ExecTimedOut"
        waits.append(pool.retry_in(key(1)))

    assert 9 < waits[0] <= 10
    assert 19 < waits[1] <= 20
    assert 39 < waits[2] <= 40


async def outcome_of(
    pool: LibrarySyncPool, attempt: str, work: Callable[[], Awaitable[SyncResult]]
) -> Outcome:
    """Run one sync of sandbox 1 for ``attempt`` in ``pool``; its outcome."""
    pool.submit(key(1), "uid", attempt, work)
    await asyncio.sleep(0.01)
    outcome = pool.take(key(1), "uid")
    assert outcome is not None
    return outcome


async def failing_in_the_pod() -> SyncResult:
    raise ExecCommandFailedError("applying the library upload exited with 1: No space left")


async def timing_out() -> SyncResult:
    raise ExecTimedOutError("the upload did not finish within 60s")


async def test_a_sync_the_pod_fails_again_and_again_is_not_retried_for_ever() -> None:
    """Each try may download the whole library again and send it through the API server:
    the pod's failure of one attempt is final at the third in a row (backoff reset)."""
    pool = LibrarySyncPool(1, backoff=Backoff(base=10.0, cap=300.0, jitter=0.0))

    outcomes = [await outcome_of(pool, "a", failing_in_the_pod) for _ in range(POD_FAILURES)]

    errors = [outcome.error for outcome in outcomes]
    assert all(error is not None and error.reason == "ExecFailed" for error in errors)
    assert [error.retryable for error in errors if error] == [True, True, False]
    final = errors[-1]
    assert final is not None
    assert "No space left" in final.message
    assert "failed 3 times in a row, so not retried until" in final.message
    assert pool.retry_in(key(1)) == 0


async def test_only_failures_of_the_same_attempt_in_a_row_count_towards_the_last() -> None:
    pool = LibrarySyncPool(1, backoff=Backoff(base=0.001, cap=0.001, jitter=0.0))

    retried = []
    for attempt, work in [
        ("a", failing_in_the_pod),
        ("a", failing_in_the_pod),
        ("b", failing_in_the_pod),  # a new revision, pod or configuration
        ("b", failing_in_the_pod),
        ("b", timing_out),  # a stopped tar costs no upload: retried with backoff
        ("b", failing_in_the_pod),
        ("b", failing_in_the_pod),
    ]:
        outcome = await outcome_of(pool, attempt, work)
        assert outcome.error is not None
        retried.append(outcome.error.retryable)

    assert all(retried)


async def test_a_sync_over_its_whole_budget_is_abandoned_and_reported() -> None:
    pool = LibrarySyncPool(1, budget_seconds=0.05)

    async def endless() -> SyncResult:
        await asyncio.Event().wait()
        return RESULT

    pool.submit(key(1), "uid", "a", endless)
    await asyncio.sleep(0.3)

    outcome = pool.take(key(1), "uid")
    assert outcome is not None
    assert outcome.error is not None
    assert (outcome.error.reason, outcome.error.retryable) == ("SyncTimedOut", True)
    assert pool.running == 0


async def test_an_unexpected_error_is_an_outcome_not_a_crash() -> None:
    pool = LibrarySyncPool(1)

    async def broken() -> SyncResult:
        raise RuntimeError("a bug")

    pool.submit(key(1), "uid", "a", broken)
    await asyncio.sleep(0.01)

    outcome = pool.take(key(1), "uid")
    assert outcome is not None
    assert isinstance(outcome.error, LibrarySyncError)
    assert outcome.error.retryable


@pytest.mark.parametrize("how", ["forget", "close"])
async def test_a_forgotten_sandbox_frees_its_slot_and_wakes_nobody(how: str) -> None:
    pool = LibrarySyncPool(1)
    woken: list[tuple[str, str]] = []
    pool.wake = woken.append

    async def endless() -> SyncResult:
        await asyncio.Event().wait()
        return RESULT

    async def quick() -> SyncResult:
        return RESULT

    pool.submit(key(1), "uid-1", "a", endless)
    await asyncio.sleep(0.01)
    if how == "forget":
        pool.forget(key(1))
    else:
        await pool.close()
    pool.submit(key(2), "uid-2", "a", quick)
    await asyncio.sleep(0.05)

    assert woken == [key(2)]
    assert not pool.busy(key(1), "uid-1")


async def test_a_drain_lets_syncs_under_way_end_within_its_grace_then_cancels_the_rest() -> None:
    pool = LibrarySyncPool(4)
    finished: list[str] = []
    cancelled: list[str] = []

    def sync(name: str, seconds: float) -> Callable[[], Awaitable[SyncResult]]:
        async def work() -> SyncResult:
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                cancelled.append(name)
                raise
            finished.append(name)
            return RESULT

        return work

    pool.submit(key(1), "uid-1", "attempt", sync("quick", 0.05))
    pool.submit(key(2), "uid-2", "attempt", sync("endless", 60))
    await asyncio.wait_for(pool.drain(0.5), 10)

    assert finished == ["quick"], "the sync that could end did, before the replica stopped"
    assert cancelled == ["endless"]
    assert not pool.busy(key(2), "uid-2")

"""Specification of detached calls: a pass waits a little for its call; a slower one runs
on without the pass, wakes the sandbox when it ends, and the next pass takes its result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from craft_operator.reconciler.detached import DetachedCalls
from craft_operator.reconciler.queue import Backoff

pytestmark = pytest.mark.unit

KEY = ("ns", "alice")


async def test_a_call_that_ends_within_the_inline_wait_is_returned_at_once() -> None:
    calls = DetachedCalls[int](inline=1.0)

    async def quick() -> int:
        return 7

    assert await calls.result(KEY, "a", quick) == 7
    assert not calls.running(KEY)


async def test_a_slow_call_runs_on_wakes_the_sandbox_and_the_next_pass_takes_it() -> None:
    calls = DetachedCalls[int](inline=0.05)
    woken: list[tuple[str, str]] = []
    calls.wake = woken.append
    release = asyncio.Event()
    started = 0

    async def slow() -> int:
        nonlocal started
        started += 1
        await release.wait()
        return 42

    assert await calls.result(KEY, "a", slow) is None, "the pass goes on without it"
    assert await calls.result(KEY, "a", slow) is None, "a pass meanwhile does not wait again"
    assert calls.running(KEY)
    release.set()
    await asyncio.sleep(0.01)
    assert woken == [KEY]
    assert await calls.result(KEY, "a", slow) == 42
    assert started == 1, "one call, never two at once"


async def test_a_call_for_another_attempt_in_another_pod_cancels_the_one_running() -> None:
    calls = DetachedCalls[str](inline=0.05)
    cancelled = asyncio.Event()

    async def hangs() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "old"

    async def new() -> str:
        return "new"

    assert await calls.result(KEY, "old-pat", hangs, owner="pod-1") is None
    assert await calls.result(KEY, "new-pat", new, owner="pod-2") == "new"
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_a_call_for_another_attempt_in_the_same_pod_waits_for_the_one_running() -> None:
    # Cancelling an exec leaves its command running in the pod: two would run at once.
    calls = DetachedCalls[str](inline=0.05)
    woken: list[tuple[str, str]] = []
    calls.wake = woken.append
    release = asyncio.Event()
    started: list[str] = []

    def call(name: str) -> Callable[[], Awaitable[str]]:
        async def run() -> str:
            started.append(name)
            if name == "old":
                await release.wait()
            return name

        return run

    assert await calls.result(KEY, "old-pat", call("old"), owner="pod-1") is None
    assert await calls.result(KEY, "new-pat", call("new"), owner="pod-1") is None
    assert started == ["old"], "the new one waits"
    release.set()
    await asyncio.sleep(0.01)
    assert woken == [KEY], "the old one's end wakes the sandbox"
    assert await calls.result(KEY, "new-pat", call("new"), owner="pod-1") == "new"
    assert started == ["old", "new"]


async def test_what_a_call_raises_reaches_the_pass_that_takes_it() -> None:
    calls = DetachedCalls[int](inline=1.0)

    async def broken() -> int:
        raise LookupError("the exec broke")

    with pytest.raises(LookupError, match="broke"):
        await calls.result(KEY, "a", broken)


async def test_beyond_the_limit_a_call_waits_for_room_and_its_pass_does_not() -> None:
    calls = DetachedCalls[int](inline=0.01, limit=1)
    woken: list[tuple[str, str]] = []
    calls.wake = woken.append
    release = asyncio.Event()

    async def slow() -> int:
        await release.wait()
        return 1

    async def quick() -> int:
        return 2

    assert await calls.result(("ns", "a"), "x", slow) is None
    assert await asyncio.wait_for(calls.result(("ns", "b"), "x", quick), 1) is None
    assert calls.waiting(("ns", "b")), "no room: not started"
    assert not calls.running(("ns", "b"))
    release.set()
    await asyncio.sleep(0.01)
    assert woken == [("ns", "a"), ("ns", "b")], "a's end wakes a, then the one waiting"
    assert not calls.waiting(("ns", "b"))
    assert await calls.result(("ns", "b"), "x", quick) == 2


async def test_once_the_operator_stops_a_call_runs_within_its_pass() -> None:
    calls = DetachedCalls[int](inline=0.01)
    await calls.drain(0)

    async def slow() -> int:
        await asyncio.sleep(0.05)
        return 3

    assert await calls.result(KEY, "x", slow) == 3, "nothing left running after the stop"
    assert not calls.running(KEY)


async def test_a_drain_lets_calls_end_within_its_grace_then_cancels_the_rest() -> None:
    calls = DetachedCalls[int](inline=0.01)
    ended: list[str] = []

    async def quick() -> int:
        await asyncio.sleep(0.05)
        ended.append("quick")
        return 1

    async def endless() -> int:
        await asyncio.sleep(60)
        return 2

    await calls.result(("ns", "a"), "x", quick)
    await calls.result(("ns", "b"), "x", endless)
    await asyncio.wait_for(calls.drain(0.5), 10)
    assert ended == ["quick"]
    assert not calls.running(("ns", "b"))


@pytest.mark.parametrize("end", ["forget", "close"])
async def test_a_call_cancelled_while_a_pass_waits_for_it_ends_that_wait_without_raising(
    end: str,
) -> None:
    calls = DetachedCalls[int](inline=5.0)

    async def hangs() -> int:
        await asyncio.sleep(60)
        return 1

    waiting = asyncio.ensure_future(calls.result(KEY, "a", hangs))
    await asyncio.sleep(0.01)
    if end == "forget":
        calls.forget(KEY)  # the sandbox was deleted
    else:
        await calls.close()  # the replica stands by
    assert await asyncio.wait_for(waiting, 1) is None, "not a CancelledError in the worker"


async def test_a_failed_target_waits_a_backoff_that_grows_until_one_succeeds() -> None:
    calls = DetachedCalls[int](backoff=Backoff(base=10.0, cap=300.0, jitter=0.0))
    assert calls.retry_in(KEY, "a") == 0
    assert calls.failed_target(KEY) is None
    assert calls.failed(KEY, "a") == 10.0
    assert 9 < calls.retry_in(KEY, "a") <= 10
    assert calls.failed_target(KEY) is not None
    assert calls.failed(KEY, "a") == 20.0, "it grows"
    assert calls.retry_in(KEY, "b") == 0, "another target (a new pod or PAT) goes at once"
    assert calls.failed(KEY, "b") == 10.0, "and counts from one"
    assert calls.retry_in(KEY, "a") == 0
    calls.clear_failures(KEY)
    assert calls.retry_in(KEY, "b") == 0
    assert calls.failed_target(KEY) is None
    calls.failed(KEY, "b")
    calls.forget(KEY)
    assert calls.retry_in(KEY, "b") == 0


async def test_the_limit_counts_the_calls_passes_still_wait_for() -> None:
    calls = DetachedCalls[int](inline=0.05, limit=2)
    release = asyncio.Event()
    started = 0

    async def slow() -> int:
        nonlocal started
        started += 1
        await release.wait()
        return 1

    keys = [("ns", f"s{index}") for index in range(10)]
    results = await asyncio.gather(*(calls.result(key, "x", slow) for key in keys))
    assert results == [None] * 10
    assert started == 2, "ten passes at once start two calls, not ten"
    assert sum(calls.waiting(key) for key in keys) == 8
    release.set()
    await calls.close()


async def _stall_once(calls: DetachedCalls[int], key: tuple[str, str], owner: str) -> None:
    """A call for ``key`` in the pod ``owner`` that runs past the wait, then ends."""
    release = asyncio.Event()

    async def held() -> int:
        await release.wait()
        return 1

    assert await calls.result(key, f"{owner}-first", held, owner=owner) is None
    release.set()
    await asyncio.sleep(0.01)
    assert await calls.result(key, f"{owner}-first", held, owner=owner) == 1


async def test_a_pod_that_held_its_call_past_the_wait_has_its_later_calls_in_the_slow_lane() -> (
    None
):
    """Hostile pods that hold every delivery to its timeout keep at most the slow lane:
    the other sandboxes' deliveries still find room at once."""
    calls = DetachedCalls[int](inline=0.02, limit=4, slow_limit=1)
    hostile = [("ns", f"hostile{index}") for index in range(6)]
    for key in hostile:
        await _stall_once(calls, key, owner=f"pod-{key[1]}")
    assert all(calls.is_slow(key, f"pod-{key[1]}") for key in hostile)

    never = asyncio.Event()

    async def hangs() -> int:
        await never.wait()
        return 0

    for key in hostile:
        assert await calls.result(key, "again", hangs, owner=f"pod-{key[1]}") is None
    assert calls.unfinished == 1, "one slow call runs; the others wait for the slow lane"
    assert sum(calls.waiting(key) for key in hostile) == 5

    async def quick() -> int:
        return 2

    for index in range(3):
        assert await calls.result(("ns", f"fine{index}"), "x", quick, owner="p") == 2
    await calls.close()


async def test_a_new_pod_of_a_sandbox_whose_pod_was_slow_is_not() -> None:
    calls = DetachedCalls[int](inline=0.02, limit=4, slow_limit=1)
    await _stall_once(calls, KEY, owner="old-pod")
    assert calls.is_slow(KEY, "old-pod")
    assert not calls.is_slow(KEY, "new-pod")
    assert not calls.is_slow(KEY, ""), "a call of no known pod is never slow"
    calls.forget(KEY)
    assert not calls.is_slow(KEY, "old-pod")


async def test_an_ended_call_wakes_the_longest_waiting_sandbox_that_has_room_now() -> None:
    calls = DetachedCalls[int](inline=0.02, limit=2, slow_limit=1)
    woken: list[tuple[str, str]] = []
    await _stall_once(calls, ("ns", "slow"), owner="s")
    await _stall_once(calls, ("ns", "slower"), owner="t")
    calls.wake = woken.append
    releases = {"s": asyncio.Event(), "fine": asyncio.Event()}

    def held(name: str) -> Callable[[], Awaitable[int]]:
        async def call() -> int:
            await releases[name].wait()
            return 1

        return call

    assert await calls.result(("ns", "slow"), "b", held("s"), owner="s") is None
    assert await calls.result(("ns", "fine"), "b", held("fine"), owner="f") is None
    assert await calls.result(("ns", "slower"), "b", held("s"), owner="t") is None
    assert await calls.result(("ns", "next"), "b", held("fine"), owner="n") is None
    assert calls.waiting(("ns", "slower"))
    assert calls.waiting(("ns", "next"))

    releases["fine"].set()
    await asyncio.sleep(0.01)
    assert woken == [("ns", "fine"), ("ns", "next")], "the slow lane is still full"
    await calls.close()


async def test_the_last_failed_target_is_known_until_its_backoff_passes() -> None:
    calls = DetachedCalls[int](backoff=Backoff(base=0.05, cap=1.0, jitter=0.0))
    assert calls.failed_target(KEY) is None
    calls.failed(KEY, "pod-1|7")
    failed = calls.failed_target(KEY)
    assert failed is not None
    assert failed[0] == "pod-1|7"
    assert 0 < failed[1] <= 0.05
    await asyncio.sleep(0.06)
    assert calls.failed_target(KEY) is None

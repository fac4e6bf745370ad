"""Specification of the keyed work queue: dedup, no concurrent runs of a key, backoff,
revisits, forgetting, the concurrency limit and stopping. Asserts counts and order only."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest

from craft_operator.reconciler.queue import Backoff, RetryableError, WorkQueue

FAST = Backoff(base=0.01, cap=0.02, jitter=0.0)


class Recorder:
    """A handler that records its calls and can be held open or made to fail."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.running: Counter[str] = Counter()
        self.max_running: Counter[str] = Counter()
        self.max_total = 0
        self.gates: dict[str, asyncio.Event] = {}
        self.fail: dict[str, int] = {}
        self.errors: dict[str, type[Exception]] = {}
        self.requeue: dict[str, float] = {}
        self.started: dict[str, asyncio.Event] = {}

    def gate(self, key: str) -> asyncio.Event:
        """Hold ``key``'s runs until the returned event is set."""
        return self.gates.setdefault(key, asyncio.Event())

    def started_event(self, key: str) -> asyncio.Event:
        """Set when a run of ``key`` has started."""
        return self.started.setdefault(key, asyncio.Event())

    async def held_open(self, queue: WorkQueue[str], key: str) -> asyncio.Event:
        """Add ``key`` and wait until its pass runs, held open until the returned event
        is set."""
        gate = self.gate(key)
        queue.add(key)
        await eventually(lambda: self.started_event(key).is_set())
        return gate

    async def __call__(self, key: str) -> float | None:
        self.calls.append(key)
        self.running[key] += 1
        self.max_running[key] = max(self.max_running[key], self.running[key])
        self.max_total = max(self.max_total, sum(self.running.values()))
        self.started_event(key).set()
        try:
            if key in self.gates:
                await self.gates[key].wait()
            else:
                await asyncio.sleep(0)
            if self.fail.get(key, 0) > 0:
                self.fail[key] -= 1
                raise self.errors.get(key, RuntimeError)(f"{key} failed")
            return self.requeue.pop(key, None)
        finally:
            self.running[key] -= 1


async def eventually(condition: Callable[[], bool], *, within: float = 5.0) -> None:
    """Wait until ``condition`` holds (a bound against hangs, not a timing assertion)."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 -- polls counters the code under test owns
            await asyncio.sleep(0.005)


async def settle() -> None:
    """Let the workers run everything that is due now."""
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def recorder() -> Recorder:
    """A fresh recording handler."""
    return Recorder()


@pytest.fixture
async def make_queue(recorder: Recorder) -> AsyncIterator[Callable[..., WorkQueue[str]]]:
    """Build started queues around ``recorder``; they are stopped after the test."""
    queues: list[WorkQueue[str]] = []

    def make(**options: object) -> WorkQueue[str]:
        options.setdefault("backoff", FAST)
        queue: WorkQueue[str] = WorkQueue(recorder, **options)  # type: ignore[arg-type]
        queue.start()
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        await queue.stop()


async def test_a_key_added_many_times_before_it_runs_runs_once(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=2)
    for _ in range(50):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    await eventually(lambda: queue.processed == 2)
    await settle()
    assert sorted(recorder.calls) == ["a", "b"]
    assert len(queue) == 0


async def test_adding_sooner_moves_a_waiting_key_earlier_and_later_does_not_delay_it(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    queue.add("a", delay=3600)
    queue.add("a", delay=0)
    await eventually(lambda: recorder.calls == ["a"])
    queue.add("b", delay=0)
    queue.add("b", delay=3600)
    await eventually(lambda: recorder.calls == ["a", "b"])
    assert len(queue) == 0


async def test_a_key_added_while_it_runs_runs_once_more_afterwards_never_concurrently(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=4)
    gate = await recorder.held_open(queue, "a")
    for _ in range(10):
        queue.add("a")
        await settle()
    assert recorder.calls == ["a"]
    gate.set()
    await eventually(lambda: queue.processed == 2)
    await settle()
    assert recorder.calls == ["a", "a"]
    assert recorder.max_running["a"] == 1


async def test_an_echo_of_the_running_pass_s_own_write_runs_nothing_more(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """The watch event of a pass's write often comes before the write's answer: whether it
    is an echo is asked when the pass ends, and an echo is no reason to run again."""
    queue = make_queue(concurrency=1)
    asked: list[str] = []
    gate = await recorder.held_open(queue, "a")
    queue.add("a", echo=lambda: asked.append("echo") is None)
    await settle()
    assert asked == []  # not before the pass ends: its write's answer may not be in yet
    gate.set()
    await eventually(lambda: queue.processed == 1)
    await settle()
    assert asked == ["echo"]
    assert recorder.calls == ["a"]
    assert len(queue) == 0


async def test_an_event_during_a_pass_that_is_not_its_echo_runs_the_key_again(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    gate = await recorder.held_open(queue, "a")
    queue.add("a", echo=lambda: True)
    queue.add("a", echo=lambda: False)  # someone else's change, among the echoes
    gate.set()
    await eventually(lambda: queue.processed == 2)
    assert recorder.calls == ["a", "a"]


async def test_an_echo_check_is_no_reason_to_hold_back_a_key_that_is_not_running(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    queue.add("a", echo=lambda: True)  # no pass of it runs: whatever it is, it is news
    await eventually(lambda: recorder.calls == ["a"])


async def test_an_echo_does_not_cancel_a_plain_add_during_the_same_pass(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    gate = await recorder.held_open(queue, "a")
    queue.add("a", echo=lambda: True)
    queue.add("a")  # e.g. a library sync that ended
    gate.set()
    await eventually(lambda: queue.processed == 2)
    assert recorder.calls == ["a", "a"]


async def test_failures_back_off_per_key_and_a_success_resets_the_count(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=2)
    recorder.fail["a"] = 3
    queue.add("a")
    queue.add("b")
    await eventually(lambda: queue.processed == 2)
    assert queue.failed == 3
    assert queue.failures("a") == 0
    assert recorder.calls.count("a") == 4
    assert recorder.calls.count("b") == 1


async def test_failures_are_counted_per_key(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=3, backoff=Backoff(base=3600, jitter=0))
    recorder.fail.update({"a": 5, "b": 5})
    for key in ["a", "b", "c"]:
        queue.add(key)
    await eventually(lambda: queue.failed == 2 and queue.processed == 1)
    queue.add("a")  # brought forward: its second failure in a row
    await eventually(lambda: queue.failed == 3)
    assert (queue.failures("a"), queue.failures("b"), queue.failures("c")) == (2, 1, 0)


async def test_a_key_that_fails_for_very_long_is_still_retried_by_a_live_worker(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, backoff=Backoff(base=0.0, cap=0.0, jitter=0.0))
    recorder.fail["a"] = 1100
    queue.add("a")
    await eventually(lambda: queue.processed == 1, within=30)
    assert queue.failed == 1100
    queue.add("b")
    await eventually(lambda: queue.processed == 2)


async def test_each_failure_in_a_row_asks_the_backoff_for_the_next_delay(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    asked: list[int] = []

    class Recording(Backoff):
        def delay(self, failures: int) -> float:
            asked.append(failures)
            return 0.0

    queue = make_queue(concurrency=1, backoff=Recording())
    recorder.fail["a"] = 3
    queue.add("a")
    await eventually(lambda: queue.processed == 1)
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.processed == 2)
    assert asked == [1, 2, 3, 1]


async def test_a_failing_key_is_retried_after_its_backoff_not_at_once(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    await settle()
    assert recorder.calls == ["a"]
    assert len(queue) == 1  # waiting for its retry
    queue.add("a")  # an event about the object brings it forward
    await eventually(lambda: queue.processed == 1)
    assert queue.failures("a") == 0


class AwayError(RetryableError):
    """A cause of failures that says when it is over (as the API server's return does)."""


async def test_keys_a_cause_failed_go_again_at_once_once_it_is_over_their_backoff_forgotten(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=3, backoff=Backoff(base=3600, jitter=0))
    recorder.errors.update(a=AwayError, c=AwayError)
    recorder.fail.update(a=2, b=1, c=1)
    for key in "abc":
        queue.add(key)
    await eventually(lambda: queue.failed == 3)

    assert queue.retry_now(AwayError, lambda key: key != "c") == 1  # b failed otherwise

    await eventually(lambda: queue.failed == 4)
    assert queue.failures("a") == 1, "a failure after the cause is over is a first one"
    await settle()
    assert sorted(recorder.calls) == ["a", "a", "b", "c"], "b and c wait out their backoff"
    assert queue.retry_now(AwayError, lambda key: True, at_most_every=0) == 2  # a again, c
    await eventually(lambda: queue.processed == 2)


async def test_a_key_the_cause_goes_on_failing_is_rushed_once_however_often_it_seems_over(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """A watch stream that flaps while the API server goes on failing a key's requests
    must not undo the key's backoff."""
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 100
    queue.add("a")
    await eventually(lambda: queue.failed == 1)

    rushed = [queue.retry_now(AwayError, lambda key: True) for _ in range(10)]
    await eventually(lambda: queue.failed == 2)
    await settle()

    assert rushed == [1] + [0] * 9
    assert recorder.calls == ["a", "a"]
    assert queue.failures("a") == 1


async def test_a_rushed_key_the_cause_fails_again_waits_its_backoff_through_further_flaps(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """The stream flaps on after the rushed pass failed again: the key is not rushed once
    per flap (a pass a second against an API server that keeps failing it)."""
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 100
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    assert queue.retry_now(AwayError, lambda key: True) == 1
    await eventually(lambda: queue.failed == 2)

    rushed = [queue.retry_now(AwayError, lambda key: True) for _ in range(5)]
    await settle()

    assert rushed == [0] * 5
    assert recorder.calls == ["a", "a"]
    assert queue.failures("a") == 1, "its backoff grows again from the rushed pass"


async def test_a_key_that_failed_otherwise_after_the_cause_goes_again_at_its_end_too(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """A restarted API server refuses requests for a moment (403) before it serves them."""
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    recorder.errors["a"] = RuntimeError
    recorder.fail["a"] = 1
    queue.add("a")  # an event about it brings it forward
    await eventually(lambda: queue.failed == 2)

    assert queue.retry_now(AwayError, lambda key: True) == 1
    await eventually(lambda: queue.processed == 1)


async def test_a_forgotten_key_is_not_brought_back_by_its_causes_end(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    queue.forget("a")
    assert queue.retry_now(AwayError, lambda key: True) == 0
    await settle()
    assert recorder.calls == ["a"]


async def test_news_of_a_keys_own_work_waits_for_its_retry_while_the_cause_lasts(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """A library sync that ended (failed: its exec met the API server's absence too) would
    otherwise visit the sandbox at once, fail again and grow its backoff two steps a time."""
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0), waits_out=(AwayError,))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)

    queue.wake("a")
    await settle()

    assert recorder.calls == ["a"], "it waits for its retry"
    assert queue.failures("a") == 1
    assert queue.retry_now(AwayError, lambda key: True) == 1, "the cause's end brings it"
    await eventually(lambda: queue.processed == 1)


async def test_news_of_a_keys_own_work_visits_it_at_once_when_it_failed_otherwise(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0), waits_out=(AwayError,))
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)

    queue.wake("a")

    await eventually(lambda: queue.processed == 1)
    assert recorder.calls == ["a", "a"]


async def test_news_that_comes_while_its_key_runs_is_read_after_that_pass_whatever_it_met(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """The pass running may succeed without having seen it."""
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0), waits_out=(AwayError,))
    recorder.errors["a"] = AwayError
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    recorder.started_event("a").clear()
    gate = await recorder.held_open(queue, "a")  # an event about it brings it forward

    queue.wake("a")
    gate.set()

    await eventually(lambda: recorder.calls == ["a", "a", "a"])


async def test_expected_failures_are_retried_like_others(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, expected=(RuntimeError,))
    recorder.fail["a"] = 2
    queue.add("a")
    await eventually(lambda: queue.processed == 1)
    assert queue.failed == 2


class LastingError(RetryableError):
    """An expected failure that is an error once it lasts (a refusal by the API server)."""

    error_after = 0.1


async def test_an_expected_failure_is_news_without_a_traceback_and_an_error_once_it_lasts(
    recorder: Recorder,
    make_queue: Callable[..., WorkQueue[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = make_queue(concurrency=1, expected=(LastingError,))
    recorder.errors["a"] = LastingError
    recorder.fail["a"] = 20  # about 0.3 s of failures, 0.01 to 0.02 s apart
    with caplog.at_level(logging.INFO, logger="craft_operator.reconciler.queue"):
        queue.add("a")
        await eventually(lambda: queue.processed == 1)

    logged = [r for r in caplog.records if r.name == "craft_operator.reconciler.queue"]
    assert len(logged) == 20
    assert all(r.exc_info is None for r in logged), "no traceback"
    assert logged[0].levelno == logging.INFO
    assert logged[0].getMessage().startswith("a failed; retry 1 in ")
    assert logged[-1].levelno == logging.ERROR
    assert "a failed; failing so for " in logged[-1].getMessage()


async def test_a_success_may_ask_for_a_later_visit(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    recorder.requeue["a"] = 0.01
    queue.add("a")
    await eventually(lambda: recorder.calls == ["a", "a"])
    await settle()
    assert queue.processed == 2


async def test_a_far_requeue_waits_in_the_queue(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    recorder.requeue["a"] = 3600
    queue.add("a")
    await eventually(lambda: queue.processed == 1)
    await settle()
    assert recorder.calls == ["a"]
    assert len(queue) == 1


async def test_visits_moved_earlier_leave_no_pile_of_superseded_entries(
    make_queue: Callable[..., WorkQueue[str]],
) -> None:
    """Each event moves a sandbox's next visit from its resync earlier: the heap keeps the
    later entry until its own time, so a churn of events must not pile them up."""
    queue = make_queue(concurrency=1)
    queue.add("a", 3600)  # a key due first holds the heap's top for the test
    for step in range(2000):
        queue.add("b", 3600 + 2000 - step)  # each call earlier than the one before
    assert len(queue) == 2
    assert len(queue._heap) <= 2 * len(queue) + 65


async def test_forget_drops_a_pending_visit_and_the_backoff_history(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1, backoff=Backoff(base=3600, jitter=0))
    recorder.fail["a"] = 1
    queue.add("a")
    await eventually(lambda: queue.failed == 1)
    assert queue.failures("a") == 1
    queue.forget("a")
    assert queue.failures("a") == 0
    assert len(queue) == 0
    queue.add("b")
    await eventually(lambda: queue.processed == 1)
    assert recorder.calls == ["a", "b"]


async def test_forget_while_running_cancels_the_rerun(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=2)
    gate = await recorder.held_open(queue, "a")
    queue.add("a")
    await settle()
    queue.forget("a")
    gate.set()
    await eventually(lambda: queue.processed == 1)
    await settle()
    assert recorder.calls == ["a"]


async def test_a_later_visit_asked_by_a_pass_whose_key_was_forgotten_meanwhile_is_dropped(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    """The sandbox was deleted while its pass ran: the revisit that pass asks for (its
    resync, a PAT's renewal) would visit an object that is gone."""
    queue = make_queue(concurrency=1)
    recorder.requeue["a"] = 0.01
    gate = await recorder.held_open(queue, "a")
    queue.forget("a")
    gate.set()
    await eventually(lambda: queue.processed == 1)
    await asyncio.sleep(0.05)

    assert recorder.calls == ["a"]
    assert len(queue) == 0


async def test_a_pass_that_fails_after_its_key_was_forgotten_leaves_no_failure_behind(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    recorder.fail["a"] = 1
    gate = await recorder.held_open(queue, "a")
    queue.forget("a")  # the sandbox is gone
    gate.set()
    await eventually(lambda: queue.failed == 1)
    await settle()
    assert queue.failures("a") == 0
    assert len(queue) == 0


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_no_more_keys_run_at_once_than_the_concurrency_allows(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]], concurrency: int
) -> None:
    queue = make_queue(concurrency=concurrency)
    keys = [f"k{index}" for index in range(10)]
    gates = [recorder.gate(key) for key in keys]
    for key in keys:
        queue.add(key)
    await eventually(lambda: len(recorder.calls) == concurrency)
    await settle()
    assert len(recorder.calls) == concurrency
    for gate in gates:
        gate.set()
    await eventually(lambda: queue.processed == 10)
    assert recorder.max_total == concurrency
    assert sorted(recorder.calls) == sorted(keys)


async def test_due_keys_run_in_the_order_they_were_added(
    recorder: Recorder, make_queue: Callable[..., WorkQueue[str]]
) -> None:
    queue = make_queue(concurrency=1)
    gate = await recorder.held_open(queue, "first")
    for key in ["c", "a", "b"]:
        queue.add(key)
    gate.set()
    await eventually(lambda: queue.processed == 4)
    assert recorder.calls == ["first", "c", "a", "b"]


async def test_stop_cancels_a_running_reconcile_and_the_workers(
    recorder: Recorder,
) -> None:
    cancelled = asyncio.Event()

    async def handler(key: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=2, backoff=FAST)
    queue.start()
    queue.add("a")
    await settle()
    await queue.stop()
    assert cancelled.is_set()
    assert queue.processed == 0
    assert queue.failed == 0
    queue.add("b")
    await settle()
    assert len(queue) >= 1  # nothing takes work any more


async def test_a_stop_with_grace_lets_a_pass_in_progress_end_and_starts_no_other() -> None:
    release = asyncio.Event()
    ended: list[str] = []
    started: list[str] = []

    async def handler(key: str) -> None:
        started.append(key)
        await release.wait()
        ended.append(key)

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=1, backoff=FAST)
    queue.start()
    queue.add("a")
    await eventually(lambda: started == ["a"])
    queue.add("b")
    stopping = asyncio.create_task(queue.stop(grace=5))
    await settle()
    release.set()
    await stopping
    assert ended == ["a"], "the pass in progress ended"
    assert started == ["a"], "no new pass started while stopping"


async def test_a_worker_waiting_for_a_due_key_starts_no_pass_while_stopping() -> None:
    """A pass started during the grace would only be cancelled at its end, cut off
    between two writes that belong together: exactly what the grace is there to avoid."""
    release = asyncio.Event()
    started: list[str] = []

    async def handler(key: str) -> None:
        started.append(key)
        if key == "a":
            await release.wait()

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=2, backoff=FAST)
    queue.start()
    queue.add("a")
    await eventually(lambda: started == ["a"])
    queue.add("b", 0.05)  # the idle worker waits for b's time
    await settle()
    stopping = asyncio.create_task(queue.stop(grace=5))
    await asyncio.sleep(0.2)  # b is due during the grace
    release.set()
    await stopping
    assert started == ["a"], "b was not started while stopping"


async def test_a_stop_with_grace_ends_while_workers_wait_for_keys_not_yet_due() -> None:
    """The stop wakes the waiting workers and cancels them at once; a wait that swallowed
    that cancellation (asyncio.wait_for on 3.11) kept the operator from exiting."""

    async def handler(key: str) -> float:
        return 300.0

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=4, backoff=FAST)
    queue.start()
    queue.add("a")
    queue.add("b", 0.05)
    await asyncio.sleep(0.2)  # a and b done, both due again in 300 s: every worker waits

    await asyncio.wait_for(queue.stop(grace=5), 10)


async def test_a_failure_retried_at_once_still_counts_towards_the_backoff() -> None:
    attempts: list[float] = []

    async def handler(key: str) -> None:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) == 1:
            raise RetryableError("edited while failing", retry_after=0)
        raise RetryableError("failing still")

    queue: WorkQueue[str] = WorkQueue(
        handler, concurrency=1, backoff=Backoff(base=30, cap=60, jitter=0),
        expected=(RetryableError,),
    )  # fmt: skip
    queue.start()
    queue.add("a")
    await eventually(lambda: len(attempts) == 2)
    await queue.stop()

    assert queue.failures("a") == 2, "the second failure backs off from the second step"


async def test_a_failure_due_sooner_than_its_backoff_is_retried_when_due() -> None:
    attempts: list[float] = []

    async def handler(key: str) -> None:
        attempts.append(asyncio.get_running_loop().time())
        raise RetryableError("failing, a PAT due for a read soon", retry_by=0.05)

    queue: WorkQueue[str] = WorkQueue(
        handler, concurrency=1, backoff=Backoff(base=30, cap=60, jitter=0),
        expected=(RetryableError,),
    )  # fmt: skip
    queue.start()
    queue.add("a")
    await eventually(lambda: len(attempts) == 3)
    await queue.stop()

    assert queue.failures("a") >= 3, "each retry still counts towards the backoff"
    assert attempts[2] - attempts[0] < 5, "not the 30 s and 60 s of the backoff"


async def test_a_pass_longer_than_the_grace_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def handler(key: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    queue: WorkQueue[str] = WorkQueue(handler, concurrency=1, backoff=FAST)
    queue.start()
    queue.add("a")
    await settle()
    await queue.stop(grace=0.05)
    assert cancelled.is_set()


async def test_a_queue_that_was_stopped_can_be_started_again(recorder: Recorder) -> None:
    queue: WorkQueue[str] = WorkQueue(recorder, concurrency=1, backoff=FAST)
    queue.start()
    await queue.stop()
    queue.add("a")
    queue.start()
    await eventually(lambda: queue.processed == 1)
    await queue.stop()


# -- Backoff -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 256.0), (10, 300.0), (50, 300.0)],
)
def test_backoff_doubles_from_the_base_up_to_the_cap(failures: int, expected: float) -> None:
    assert Backoff(base=1.0, cap=300.0, jitter=0.0).delay(failures) == expected


@pytest.mark.parametrize("failures", [1025, 1100, 10**6])
def test_backoff_stays_at_the_cap_however_long_a_key_keeps_failing(failures: int) -> None:
    """At 300 s a retry, 1025 failures is 3.5 days: a sandbox whose user was deleted in
    Onyx gets there. An OverflowError here would end the worker task (and drop the key)."""
    assert Backoff(base=1.0, cap=300.0, jitter=0.0).delay(failures) == 300.0
    assert 270.0 <= Backoff(base=1.0, cap=300.0, jitter=0.1).delay(failures) <= 330.0


@pytest.mark.parametrize("failures", [9, 10, 11, 50])
def test_backoff_jitter_never_takes_a_delay_past_the_cap(failures: int) -> None:
    """A failing sandbox is retried at least every 5 minutes (the README's "1 s doubling
    to 5 minutes"), jitter or not."""
    backoff = Backoff(base=1.0, cap=300.0, jitter=0.1)
    assert max(backoff.delay(failures) for _ in range(500)) <= 300.0


@pytest.mark.parametrize("failures", [1, 2, 5, 20])
def test_backoff_jitter_stays_within_its_fraction(failures: int) -> None:
    backoff = Backoff(base=1.0, cap=60.0, jitter=0.1)
    raw = Backoff(base=1.0, cap=60.0, jitter=0.0).delay(failures)
    delays = [backoff.delay(failures) for _ in range(500)]
    assert all(raw * 0.9 <= delay <= raw * 1.1 for delay in delays)
    assert len(set(delays)) > 1


def test_backoff_grows_monotonically_without_jitter() -> None:
    backoff = Backoff(base=0.5, cap=100.0, jitter=0.0)
    delays = [backoff.delay(failures) for failures in range(1, 15)]
    assert delays == sorted(delays)
    assert all(later <= 2 * earlier for earlier, later in itertools.pairwise(delays))

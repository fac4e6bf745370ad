"""Specification of pausing the work queue (a standby replica): nothing runs while paused, an
interrupted pass is visited again on resume unless cleared, and a queue paused before it
starts spawns no worker until resumed."""

from __future__ import annotations

import asyncio

import pytest

from craft_operator.reconciler.queue import WorkQueue
from tests.unit.reconciler.test_queue import FAST, Recorder, eventually, settle

pytestmark = pytest.mark.unit


async def test_a_paused_queue_runs_nothing_and_resumes_with_what_was_added() -> None:
    recorder = Recorder()
    queue: WorkQueue[str] = WorkQueue(recorder, concurrency=2, backoff=FAST)
    queue.start()
    try:
        await queue.pause()
        queue.add("a")
        queue.add("b", delay=0.01)
        await asyncio.sleep(0.05)  # past b's due time; nothing may run meanwhile
        assert queue.paused
        assert recorder.calls == []
        queue.resume()
        await eventually(lambda: sorted(recorder.calls) == ["a", "b"])
    finally:
        await queue.stop()


async def test_pausing_cancels_the_pass_in_progress_and_visits_it_again_on_resume() -> None:
    recorder = Recorder()
    recorder.gate("a")  # held open until cancelled
    queue: WorkQueue[str] = WorkQueue(recorder, concurrency=1, backoff=FAST)
    queue.start()
    try:
        queue.add("a")
        await asyncio.wait_for(recorder.started_event("a").wait(), 5)
        await queue.pause()
        assert recorder.running["a"] == 0
        assert len(queue) == 1
        recorder.gates["a"].set()
        queue.resume()
        await eventually(lambda: recorder.calls == ["a", "a"])
    finally:
        await queue.stop()


async def test_clearing_a_paused_queue_forgets_every_visit_and_failure() -> None:
    recorder = Recorder()
    recorder.fail["a"] = 1000  # retried with backoff for as long as the test runs
    queue: WorkQueue[str] = WorkQueue(recorder, concurrency=1, backoff=FAST)
    queue.start()
    try:
        queue.add("a")
        await eventually(lambda: queue.failures("a") >= 1)
        await queue.pause()
        before = list(recorder.calls)
        queue.add("b")
        queue.clear()
        assert len(queue) == 0
        assert queue.failures("a") == 0
        queue.resume()
        queue.add("c")
        await eventually(lambda: "c" in recorder.calls)
        await asyncio.sleep(0.05)  # past a's backoff, had it been kept
        assert recorder.calls == [*before, "c"]
    finally:
        await queue.stop()


async def test_a_queue_paused_before_it_starts_works_only_once_resumed() -> None:
    recorder = Recorder()
    queue: WorkQueue[str] = WorkQueue(recorder, concurrency=1, backoff=FAST)
    await queue.pause()
    queue.start()
    try:
        queue.add("a")
        await settle()
        assert recorder.calls == []
        queue.resume()
        await eventually(lambda: recorder.calls == ["a"])
    finally:
        await queue.stop()

"""SIGUSR1 writes where every task waits to the log, down its await chain; the operator
goes on (for a stuck worker, whose pass the dump names)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from craft_operator.handlers import lifecycle

pytestmark = pytest.mark.unit


async def stuck_in_a_step(gate: asyncio.Event) -> None:
    await deep_inside(gate)


async def deep_inside(gate: asyncio.Event) -> None:
    await gate.wait()


async def test_the_dump_follows_each_task_down_to_where_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(stuck_in_a_step(gate), name="reconcile worker 3")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        lifecycle.dump_tasks()
    gate.set()
    await task
    [record] = [r for r in caplog.records if "reconcile worker 3" in r.getMessage()]
    text = record.getMessage()
    assert (
        text.index("in stuck_in_a_step") < text.index("in deep_inside") < text.index("in wait")
    ), text
    assert "SIGUSR1: the stacks of" in caplog.text


async def test_sigusr1_dumps_the_tasks_and_the_operator_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lifecycle.dump_tasks_on_signal()
    try:
        with caplog.at_level(logging.WARNING):
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):
                await asyncio.sleep(0.01)
                if "the stacks of" in caplog.text:
                    break
        assert "SIGUSR1: the stacks of" in caplog.text
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)

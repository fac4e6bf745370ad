"""Specification of the operator's stop signals: the first SIGTERM or SIGINT asks for a
stop that drains the work first; a second one stops at once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest

from craft_operator.handlers import lifecycle

pytestmark = pytest.mark.unit


@pytest.fixture
async def flags() -> AsyncIterator[tuple[asyncio.Event, asyncio.Event]]:
    """The operator's stop request and kopf's stop flag, with the signals caught."""
    requested, kopf_stop = asyncio.Event(), asyncio.Event()
    lifecycle.catch_stop_signals(requested, kopf_stop)
    yield requested, kopf_stop
    loop = asyncio.get_running_loop()
    for signum in lifecycle.STOP_SIGNALS:
        loop.remove_signal_handler(signum)


async def test_the_first_signal_asks_for_a_drain_and_the_second_stops_at_once(
    flags: tuple[asyncio.Event, asyncio.Event],
) -> None:
    requested, kopf_stop = flags

    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(requested.wait(), 5)
    assert not kopf_stop.is_set(), "kopf stops only once the work is drained"

    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.wait_for(kopf_stop.wait(), 5)

"""Specification of the operator's stop signals: the first SIGTERM or SIGINT asks for a
stop that drains the work first; a second one stops at once."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.handlers import lifecycle
from craft_operator.runtime import build_context

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


async def test_a_stop_ends_the_library_syncs_under_way_before_kopf_leaves_the_peering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once kopf stops, the replica's peering record goes and its standby takes over: an
    Exec-mode sync still writing into a pod then would work beside the new leader."""
    monkeypatch.setattr(lifecycle, "STOP_GRACE", 0.05)
    memo = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    started, ended = asyncio.Event(), asyncio.Event()

    async def endless_sync() -> Any:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    memo.services.library_pool.submit(("team-a", "alice"), "uid-1", "attempt-1", endless_sync)
    await asyncio.wait_for(started.wait(), 5)
    requested, kopf_stop = asyncio.Event(), asyncio.Event()
    ended_when_kopf_stopped: list[bool] = []

    async def kopf() -> None:
        await kopf_stop.wait()
        ended_when_kopf_stopped.append(ended.is_set())

    watching = asyncio.create_task(kopf())
    requested.set()
    await asyncio.wait_for(lifecycle.stop_in_order(memo, requested, kopf_stop), 5)
    await asyncio.wait_for(watching, 5)

    assert ended_when_kopf_stopped == [True]

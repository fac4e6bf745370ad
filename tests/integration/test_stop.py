"""Stopping the operator: the first SIGTERM drains the passes in progress for their grace;
a second one stops at once, the clean-up included."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.handlers import lifecycle
from tests.support.emulator import KubeEmulator
from tests.support.operator import start_operator

pytestmark = pytest.mark.integration


async def test_a_second_signal_cuts_the_drain_short_and_the_clean_up_waits_no_more(
    emulator: KubeEmulator, settings: Settings, pod_exec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass stuck on a silent dependency: the clean-up waited out the drain's grace again
    (an hour here), so the second signal saved nothing."""
    monkeypatch.setattr(lifecycle, "STOP_GRACE", 3600.0)
    flags: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}
    catch = lifecycle.catch_stop_signals

    def caught(requested: asyncio.Event, kopf_stop: asyncio.Event) -> None:
        flags["stop"] = (requested, kopf_stop)
        catch(requested, kopf_stop)

    monkeypatch.setattr(lifecycle, "catch_stop_signals", caught)
    running = await start_operator(str(emulator.url).rstrip("/"), settings, exec_transport=pod_exec)
    running.foreign.add(asyncio.current_task())  # type: ignore[arg-type]
    started = asyncio.Event()

    async def stuck(key: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    running.context.queue._handler = stuck  # type: ignore[assignment]
    running.context.queue.add(("default", "stuck"))
    await asyncio.wait_for(started.wait(), 10)
    requested, kopf_stop = flags["stop"]

    lifecycle._stop_requested(signal.SIGTERM, requested, kopf_stop)  # drain
    lifecycle._stop_requested(signal.SIGTERM, requested, kopf_stop)  # then at once

    await asyncio.wait_for(running.task, 60)

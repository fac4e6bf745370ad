"""Suspend and resume: a resumed sandbox wakes (a fresh idle window, a warm pod if a pool
matches, its time to Ready from now), unless it was asleep before it was suspended."""

from __future__ import annotations

import pytest

from craft_operator.metrics import time_to_ready
from craft_operator.reconciler.steps import sleep
from tests.unit.reconciler.steps.conftest import NOW, World

pytestmark = pytest.mark.unit

LONG_AGO = "2026-11-20T12:00:00Z"  # three days before NOW
OLD_ACTIVITY = {"craft.onyx.app/last-activity": "2026-11-23T10:00:00Z"}  # 2 h before NOW


async def test_a_resumed_sandbox_wakes_with_a_fresh_idle_window(world: World) -> None:
    p = world.pass_(
        spec={"idleTimeout": "1h"},
        status={"phase": "Suspended"},
        annotations=OLD_ACTIVITY,
    )
    assert await sleep.hold(p, None) is None, "not asleep at once on its old activity"
    assert p.run.status.woke_at == NOW
    assert world.events.reasons == ["SandboxResumed"]


async def test_a_sandbox_asleep_when_suspended_sleeps_on_after_the_resume(world: World) -> None:
    p = world.pass_(
        spec={"idleTimeout": "1h"},
        status={"phase": "Suspended", "sleepingSince": "2026-11-23T11:00:00Z"},
        annotations=OLD_ACTIVITY,
    )
    stop = await sleep.hold(p, None)
    assert stop is not None
    assert stop.reason == "Sleeping"
    assert p.run.status.woke_at is None
    assert "SandboxResumed" not in world.events.reasons


async def test_a_sandbox_still_suspended_does_not_wake(world: World) -> None:
    p = world.pass_(spec={"suspend": True}, status={"phase": "Suspended"})
    stop = await sleep.hold(p, None)
    assert stop is not None
    assert stop.reason == "Suspended"
    assert p.run.status.woke_at is None


async def test_the_time_to_ready_after_a_resume_counts_from_the_resume(world: World) -> None:
    suspended_long_ago = {
        "phase": "Suspended",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Suspended",
                "message": "spec.suspend is true",
                "lastTransitionTime": LONG_AGO,
            }
        ],
    }
    p = world.pass_(status=suspended_long_ago)
    await sleep.hold(p, None)
    p.run.status.phase = "Ready"  # what the pass that brings it back writes
    seconds = time_to_ready(p.run.body, p.run.status, NOW.replace(second=3))
    assert seconds == 3.0

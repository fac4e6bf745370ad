"""The client and the operator agree on what wakes an idle sandbox: an activity at or after
``status.sleepingSince``, both to the second (so a touch() in that very second wakes it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from craft_operator.client.readiness import failure_of, progress_of
from craft_operator.reconciler.idle import decide_idle

SINCE = datetime(2026, 11, 23, 9, 14, tzinfo=UTC)


def asleep_with(activity: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": "alice",
            "namespace": "team-a",
            "generation": 1,
            "annotations": {"craft.onyx.app/last-activity": activity},
        },
        "status": {
            "phase": "Sleeping",
            "observedGeneration": 1,
            "sleepingSince": "2026-11-23T09:14:00Z",
        },
    }


@pytest.mark.parametrize(
    ("activity", "wakes"),
    [
        ("2026-11-23T09:13:59Z", False),
        ("2026-11-23T09:14:00Z", True),
        ("2026-11-23T09:14:01Z", True),
    ],
)
def test_wait_ready_gives_up_only_on_a_sandbox_the_operator_leaves_asleep(
    activity: str, wakes: bool
) -> None:
    operator = decide_idle(
        idle_timeout=timedelta(hours=1),
        last_activity=activity,
        sleeping_since=SINCE,
        now=SINCE + timedelta(seconds=2),
    )
    gives_up = failure_of(progress_of(asleep_with(activity))) is not None

    assert operator.wake_now is wakes
    assert gives_up is not wakes

"""Sleep: suspend, and idle sleep driven by the last-activity annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    condition,
    event_posted,
    event_reasons,
    live_pats,
    phase,
    pod,
    pod_gone,
    refuse_pod_deletion,
    sandbox,
    status,
    token_in_secret,
)
from tests.integration.test_drift import ready_sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import mark_pod_running

ACTIVITY = "craft.onyx.app/last-activity"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_suspend_deletes_the_pod_and_keeps_credentials_and_resume_brings_it_back(
    emulator: KubeEmulator, operator: OperatorContext, settings: Settings
) -> None:
    await ready_sandbox(emulator)
    token = token_in_secret(emulator, "alice")

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": True}})

    suspended = await phase(emulator, "alice", "Suspended")
    await pod_gone(emulator, "alice")
    assert token_in_secret(emulator, "alice") == token
    assert suspended["credentials"]["tokenDisplay"].startswith(token[:12])
    assert condition(emulator, "alice", "PodReady")["reason"] == "Suspended"
    assert live_pats(settings) != []

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": False}})

    await eventually(lambda: pod(emulator, "alice"), what="the pod back")
    mark_pod_running(emulator, NAMESPACE, "alice")
    await phase(emulator, "alice", "Ready")
    assert token_in_secret(emulator, "alice") == token
    assert len(live_pats(settings)) == 1


async def test_a_resumed_sandbox_gets_a_fresh_idle_window_not_a_sleep_at_once(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    # Created suspended with its last activity two hours old, under a one-hour timeout.
    manifest = sandbox("alice", idleTimeout="1h", suspend=True)
    manifest["metadata"]["annotations"] = {ACTIVITY: stamp(datetime.now(UTC) - timedelta(hours=2))}
    emulator.create(SANDBOXES, manifest)
    await phase(emulator, "alice", "Suspended")

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"spec": {"suspend": False}})

    await eventually(lambda: pod(emulator, "alice"), what="the pod after the resume")
    mark_pod_running(emulator, NAMESPACE, "alice")
    resumed = await phase(emulator, "alice", "Ready")
    assert resumed["wokeAt"], "a resume is a wake: the idle window starts now"
    assert "sleepingSince" not in resumed
    await event_posted(emulator, "alice", "SandboxResumed")


async def test_an_idle_sandbox_sleeps_and_newer_activity_wakes_it(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    manifest = sandbox("alice", idleTimeout="1h")
    manifest["metadata"]["annotations"] = {ACTIVITY: stamp(long_ago)}

    emulator.create(SANDBOXES, manifest)

    slept = await phase(emulator, "alice", "Sleeping")
    await pod_gone(emulator, "alice")
    assert slept["sleepingSince"]
    await event_posted(emulator, "alice", "SandboxSleeping")

    emulator.patch(
        SANDBOXES,
        NAMESPACE,
        "alice",
        {"metadata": {"annotations": {ACTIVITY: stamp(datetime.now(UTC) + timedelta(seconds=5))}}},
    )

    await eventually(lambda: pod(emulator, "alice"), what="the pod after waking")
    mark_pod_running(emulator, NAMESPACE, "alice")
    awake = await phase(emulator, "alice", "Ready")
    assert "sleepingSince" not in awake
    await event_posted(emulator, "alice", "SandboxWaking")


async def test_a_running_sandbox_falls_asleep_when_its_activity_ages_past_the_timeout(
    emulator: KubeEmulator, operator: OperatorContext
) -> None:
    almost = datetime.now(UTC) - timedelta(minutes=1, seconds=-2)  # idle for 58s of 1m
    manifest = sandbox("alice", idleTimeout="1m")
    manifest["metadata"]["annotations"] = {ACTIVITY: stamp(almost)}
    emulator.create(SANDBOXES, manifest)
    await eventually(lambda: pod(emulator, "alice"), what="the pod")

    await phase(emulator, "alice", "Sleeping", within=15)  # no event needed: a timed revisit

    await pod_gone(emulator, "alice")


@pytest.mark.parametrize("activity", ["yesterday", "2026-13-45T99:00:00Z", "1700000000"])
async def test_an_unparseable_activity_never_deletes_the_pod_and_is_reported(
    emulator: KubeEmulator, operator: OperatorContext, activity: str
) -> None:
    manifest = sandbox("alice", idleTimeout="1m")
    manifest["metadata"]["annotations"] = {ACTIVITY: activity}

    emulator.create(SANDBOXES, manifest)
    await eventually(lambda: pod(emulator, "alice"), what="the pod")
    mark_pod_running(emulator, NAMESPACE, "alice")

    await phase(emulator, "alice", "Ready")
    await event_posted(emulator, "alice", "LastActivityInvalid")
    assert pod(emulator, "alice") is not None
    assert "sleepingSince" not in status(emulator, "alice")


@pytest.mark.parametrize("how", ["suspended", "idle"])
async def test_a_pod_whose_deletion_is_refused_is_not_said_stopped(
    emulator: KubeEmulator, operator: OperatorContext, how: str
) -> None:
    """An admission webhook refusing pod deletes: the status said Suspended or Sleeping with
    Ready True while the pod ran on, and a SandboxSleeping event said it was stopped."""
    await ready_sandbox(emulator)
    emulator.before_request.append(refuse_pod_deletion)
    if how == "suspended":
        change: dict[str, Any] = {"spec": {"suspend": True}}
    else:
        long_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        change = {
            "spec": {"idleTimeout": "1h"},
            "metadata": {"annotations": {"craft.onyx.app/last-activity": long_ago}},
        }

    emulator.patch(SANDBOXES, NAMESPACE, "alice", change)

    refused = await eventually(
        lambda: (
            (c := condition(emulator, "alice", "PodReady")).get("reason") == "PodStopFailed" and c
        ),
        what="PodStopFailed",
    )
    assert "cannot be stopped" in refused["message"]
    assert condition(emulator, "alice", "Ready")["status"] == "False"
    assert status(emulator, "alice").get("podUID") is not None
    assert pod(emulator, "alice") is not None
    assert "SandboxSleeping" not in event_reasons(emulator, "alice")

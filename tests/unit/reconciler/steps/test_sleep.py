"""Suspend and resume: a resumed sandbox wakes (a fresh idle window, a warm pod if a pool
matches, its time to Ready from now), unless it was asleep before it was suspended; the
suspension and the resume are noted before any step may stop the pass."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest
from aiohttp import web
from kmock._internal import rendering

from craft_operator.api.constants import LABEL_SANDBOX
from craft_operator.api.pool import LABEL_CLAIMED_FROM
from craft_operator.api.status_codec import dump_status
from craft_operator.metrics import time_to_ready
from craft_operator.reconciler import suspension
from craft_operator.reconciler.step import Memory, Pass
from craft_operator.reconciler.steps import pod, sleep
from craft_operator.reconciler.table import run_steps
from tests.support.pod_exec import mark_pod_running
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import NAME, NOW, UID, World, sandbox_body

pytestmark = pytest.mark.unit

LONG_AGO = "2026-11-20T12:00:00Z"  # three days before NOW
OLD_ACTIVITY = {"craft.onyx.app/last-activity": "2026-11-23T10:00:00Z"}  # 2 h before NOW


def parsed(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_the_first_pass_that_sees_suspend_notes_it_once(world: World) -> None:
    p = world.pass_(spec={"suspend": True}, status={"phase": "Ready"})
    suspension.note(p)
    assert p.run.status.suspended_at == NOW
    later = world.pass_(spec={"suspend": True}, status={"suspendedAt": LONG_AGO})
    suspension.note(later)
    assert later.run.status.suspended_at == parsed(LONG_AGO), "the first moment stays"


async def test_a_resumed_sandbox_wakes_with_a_fresh_idle_window(world: World) -> None:
    p = world.pass_(
        spec={"idleTimeout": "1h"},
        # Suspended during a database outage, say: the phase says nothing any more.
        status={"phase": "Pending", "suspendedAt": LONG_AGO},
        annotations=OLD_ACTIVITY,
    )
    suspension.note(p)
    assert p.run.status.woke_at == NOW
    assert p.run.status.suspended_at is None
    assert world.events.reasons == ["SandboxResumed"]
    assert await sleep.hold(p, None) is None, "not asleep at once on its old activity"


async def test_a_sandbox_suspended_before_suspended_at_existed_is_resumed_by_its_phase(
    world: World,
) -> None:
    p = world.pass_(status={"phase": "Suspended"})
    suspension.note(p)
    assert p.run.status.woke_at == NOW
    assert world.events.reasons == ["SandboxResumed"]


async def test_a_resume_whose_status_was_not_written_is_not_said_twice(world: World) -> None:
    memory = Memory()
    stored = {"phase": "Suspended", "suspendedAt": LONG_AGO}
    first = world.pass_(status=stored)
    first.memory = memory
    suspension.note(first)
    again = world.pass_(status=stored)  # the first pass's status never reached the server
    again.memory = memory
    again.run.now = NOW.replace(minute=5)
    suspension.note(again)
    assert again.run.status.woke_at == NOW, "the wake stays the first resume's moment"
    assert world.events.reasons == ["SandboxResumed"]


async def test_a_sandbox_asleep_when_suspended_sleeps_on_after_the_resume(world: World) -> None:
    p = world.pass_(
        spec={"idleTimeout": "1h"},
        status={
            "phase": "Suspended",
            "suspendedAt": LONG_AGO,
            "sleepingSince": "2026-11-23T11:00:00Z",
        },
        annotations=OLD_ACTIVITY,
    )
    suspension.note(p)
    assert p.run.status.woke_at is None
    assert p.run.status.suspended_at is None
    stop = await sleep.hold(p, None)
    assert stop is not None
    assert stop.reason == "Sleeping"
    assert "SandboxResumed" not in world.events.reasons


async def test_the_time_to_ready_after_a_resume_counts_from_the_resume(world: World) -> None:
    suspended_long_ago = {
        "phase": "Suspended",
        "suspendedAt": LONG_AGO,
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
    suspension.note(p)
    p.run.status.phase = "Ready"  # what the pass that brings it back writes
    seconds = time_to_ready(p.run.body, p.run.status, NOW.replace(second=3))
    assert seconds == 3.0


async def test_a_second_suspension_is_a_new_resume_with_its_own_moment(world: World) -> None:
    memory = Memory()
    first = world.pass_(status={"phase": "Suspended", "suspendedAt": LONG_AGO})
    first.memory = memory
    suspension.note(first)  # resumed at NOW; its status never written
    again = world.pass_(spec={"suspend": True}, status={"suspendedAt": LONG_AGO})
    again.memory = memory
    suspension.note(again)  # suspended again (the same stored suspendedAt)
    later = NOW.replace(hour=18)
    resumed = world.pass_(status={"phase": "Suspended", "suspendedAt": LONG_AGO})
    resumed.memory = memory
    resumed.run.now = later
    suspension.note(resumed)
    assert resumed.run.status.woke_at == later, "not the first resume's moment"
    assert world.events.reasons == ["SandboxResumed", "SandboxResumed"]


async def test_a_sandbox_known_suspended_by_its_phase_alone_is_resumed_once(
    world: World,
) -> None:
    memory = Memory()
    for minute in (0, 5):  # the first pass's status never written
        p = world.pass_(status={"phase": "Suspended"})
        p.memory = memory
        p.run.now = NOW.replace(minute=minute)
        suspension.note(p)
        assert p.run.status.woke_at == NOW
    assert world.events.reasons == ["SandboxResumed"]


async def test_an_activity_written_while_the_pass_ran_keeps_the_pod(world: World) -> None:
    # The pass read a stale activity (it waited on the credential database, say); the
    # user's touch() since is in the cache: the active user's pod must not be stopped.
    p = world.pass_(spec={"idleTimeout": "1h"}, annotations=OLD_ACTIVITY)
    touched = {"craft.onyx.app/last-activity": "2026-11-23T11:59:50Z"}
    world.cache.put("CraftSandbox", sandbox_body(spec={"idleTimeout": "1h"}, annotations=touched))
    assert await sleep.hold(p, None) is None
    assert p.run.status.sleeping_since is None
    assert p.run.verdict.changed, "visited again at once, with the new activity"
    assert world.events.reasons == []


async def test_an_awake_sandbox_is_looked_at_again_when_its_idle_timeout_ends(
    world: World,
) -> None:
    """Not only at the next idle check: a sandbox 10 s from its timeout sleeps then."""
    activity = {"craft.onyx.app/last-activity": "2026-11-23T11:00:10Z"}  # 1 h less 10 s ago
    p = world.pass_(spec={"idleTimeout": "1h"}, annotations=activity)
    assert await sleep.hold(p, None) is None
    assert p.run.verdict.after == 11


async def test_a_sandbox_woken_by_activity_seen_late_stays_awake_for_its_timeout(
    world: World,
) -> None:
    """Activity after it fell asleep, seen an hour late (an outage of the operator): the
    wake starts the idle window, or the next pass would put it to sleep at once."""
    late = {"craft.onyx.app/last-activity": "2026-11-23T10:30:00Z"}
    asleep = {"phase": "Sleeping", "sleepingSince": "2026-11-23T10:00:00Z"}
    woken = world.pass_(spec={"idleTimeout": "1h"}, annotations=late, status=asleep)
    assert await sleep.hold(woken, None) is None
    assert world.events.reasons == ["SandboxWaking"]
    assert woken.run.status.woke_at == NOW

    status = dump_status(woken.run.finish())
    later = world.pass_(spec={"idleTimeout": "1h"}, annotations=late, status=status)
    later.run.now = NOW + timedelta(minutes=1)
    assert await sleep.hold(later, None) is None, "awake until an hour after the wake"
    assert later.run.status.sleeping_since is None


async def test_an_unreadable_activity_is_said_once_not_on_every_pass(world: World) -> None:
    memory = Memory()
    unreadable = {"craft.onyx.app/last-activity": "yesterday"}
    for _ in range(2):
        p = world.pass_(spec={"idleTimeout": "1h"}, annotations=unreadable, memory=memory)
        assert await sleep.hold(p, None) is None, "never asleep on it"
    assert world.events.reasons == ["LastActivityInvalid"]


async def test_a_sandbox_whose_pod_cannot_be_stopped_is_not_said_asleep(world: World) -> None:
    world.emulator.create("v1/pods", ready_pod())
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    world.emulator.before_request.append(refuse_deleting(NAME))
    p = world.pass_(spec={"idleTimeout": "1h"}, annotations=OLD_ACTIVITY)
    stop = await pod.converge_pod(p)

    assert stop is not None
    assert stop.reason == sleep.STOP_FAILED
    assert world.stored("v1/pods", NAME) is not None
    assert "SandboxSleeping" not in world.events.reasons, "its pod runs on"


async def test_falling_asleep_ends_the_row_of_failed_pods_and_the_verdict_on_onyx_cli(
    world: World,
) -> None:
    # Pods that failed, Onyx refusing a fresh PAT: the next pod, after the wake, starts
    # afresh (one eviction must not end it Failed, nor the client take a stale AuthFailed
    # as final).
    p = world.pass_(
        spec={"idleTimeout": "1h"},
        annotations=OLD_ACTIVITY,
        status={
            "podFailures": 2,
            "lastPodFailureTime": "2026-11-23T11:00:00Z",
            "cliAuthFailures": 2,
            "conditions": [
                {"type": "CLIValidated", "status": "False", "reason": "AuthFailed"},
            ],
        },
    )
    assert await sleep.hold(p, None) is not None
    status = p.run.status
    assert (status.pod_failures, status.last_pod_failure_time, status.cli_auth_failures) == (
        None,
        None,
        None,
    )
    cli = p.run.condition("CLIValidated")
    assert cli is not None
    assert (cli.status, cli.reason) == ("Unknown", "Sleeping")


def ready_with_a_renewed_pat(world: World) -> dict[str, object]:
    """A running pod that validated PAT 1, renewed as PAT 2 in this pass: the status."""
    made = world.emulator.create("v1/pods", ready_pod())
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    uid = made["metadata"]["uid"]
    world.credentials.grace_pat_id, world.credentials.pat_id = 1, 2
    return {"phase": "Ready", "validatedPatID": 1, "validatedPodUID": uid, "podUID": uid}


def nothing_delivered_into_the_stopped_pod(world: World, p: Pass) -> None:
    """The pass stopped the pod, and ran nothing in it."""
    stopped = world.stored("v1/pods", NAME)
    assert stopped is None or stopped["metadata"].get("deletionTimestamp")
    assert world.exec.calls == [], "no exec into the pod the pass just deleted"
    cli = p.run.condition("CLIValidated")
    assert cli is not None
    assert cli.status == "Unknown", "validated in the next pod, not in the stopped one"


@pytest.mark.parametrize("stop", [{"idleTimeout": "1h"}, {"suspend": True}], ids=str)
async def test_no_renewed_pat_goes_into_the_pod_the_same_pass_stopped(
    world: World, stop: dict[str, object]
) -> None:
    status = ready_with_a_renewed_pat(world)
    p = world.pass_(spec=stop, annotations=OLD_ACTIVITY, status=status)
    await run_steps(p)

    nothing_delivered_into_the_stopped_pod(world, p)


@pytest.mark.parametrize("stop", [{"idleTimeout": "1h"}, {"suspend": True}], ids=str)
async def test_no_renewed_pat_goes_into_the_pod_a_pass_stopped_before_the_pod_row_stops(
    world: World, stop: dict[str, object]
) -> None:
    status = ready_with_a_renewed_pat(world)
    # Another's Secret holds the credentials Secret's name: the pass ends at its row.
    foreign = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{NAME}-credentials", "namespace": NAMESPACE},
    }
    world.cache.put("Secret", world.emulator.create("v1/secrets", foreign))
    p = world.pass_(spec=stop, annotations=OLD_ACTIVITY, status=status)
    await run_steps(p)

    nothing_delivered_into_the_stopped_pod(world, p)
    assert p.run.status.validated_pat_id == 1, "nothing validated in the stopped pod"


def ready_pod() -> dict[str, object]:
    """The sandbox's pod, as a pass before this one made it."""
    owner = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "name": NAME,
        "uid": UID,
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "sandbox", "image": "x"}]},
    }


#: A sandbox suspended, or asleep: its spec and its status.
STOPPED = pytest.mark.parametrize(
    ("spec", "status"),
    [
        ({"suspend": True}, {"phase": "Suspended", "suspendedAt": "2026-11-23T10:00:00Z"}),
        ({"idleTimeout": "1h"}, {"phase": "Sleeping", "sleepingSince": "2026-11-23T11:00:00Z"}),
    ],
    ids=["suspended", "asleep"],
)


@STOPPED
async def test_a_stopped_pod_stuck_being_deleted_is_said_and_looked_at(
    world: World, spec: dict[str, object], status: dict[str, object]
) -> None:
    stuck = ready_pod()
    meta = stuck["metadata"]
    assert isinstance(meta, dict)
    # Deleted two hours ago, its grace period long past: a finalizer of someone's holds it.
    meta.update(
        uid="pod-1",
        resourceVersion="5",
        deletionTimestamp="2026-11-23T10:00:30Z",
        finalizers=["example.com/hold"],
    )
    world.cache.put("Pod", stuck)
    p = world.pass_(spec=spec, status=status, annotations=OLD_ACTIVITY)
    await pod.converge_pod(p)

    ready = p.run.condition("PodReady")
    assert ready is not None
    assert ready.reason == status["phase"]
    assert f"but pod {NAME} is still being deleted, past its grace period" in ready.message
    assert p.run.status.pod_uid == "pod-1", "the pod is still there"
    assert p.run.verdict.after == 60, "looked at once a minute"


@pytest.mark.parametrize("stop", [{"idleTimeout": "1h"}, {"suspend": True}], ids=str)
async def test_a_stopped_pod_being_deleted_is_looked_at_again_once_it_would_be_overdue(
    world: World, stop: dict[str, object]
) -> None:
    world.emulator.create("v1/pods", ready_pod())
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    deleting = world.emulator.get("v1/pods", NAMESPACE, NAME)
    meta = deleting["metadata"]
    # As the API server answers a graceful delete: due at the end of its grace period.
    meta["deletionTimestamp"] = "2026-11-23T12:00:30Z"  # NOW + 30 s
    world.cache.put("Pod", deleting)
    p = world.pass_(spec=stop, annotations=OLD_ACTIVITY)
    await pod.converge_pod(p)

    # Held by a finalizer it would send no event: the pass comes when it would be overdue.
    assert p.run.verdict.after == 91


@STOPPED
async def test_every_other_pod_the_sandbox_controls_stops_with_its_pod(
    world: World, spec: dict[str, object], status: dict[str, object]
) -> None:
    world.emulator.create("v1/pods", ready_pod())
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    # Its pod was asked to stop an hour ago and is held there (a finalizer, a lost node)...
    stuck = world.emulator.get("v1/pods", NAMESPACE, NAME)
    stuck["metadata"].update(
        deletionTimestamp="2026-11-23T11:00:00Z", finalizers=["example.com/hold"]
    )
    world.cache.put("Pod", stuck)
    # ... beside a pool pod it claimed too (a claim whose answer was lost, say).
    extra = ready_pod()
    meta = extra["metadata"]
    assert isinstance(meta, dict)
    meta.update(name="standard-x1", labels={LABEL_SANDBOX: NAME, LABEL_CLAIMED_FROM: "standard"})
    world.emulator.create("v1/pods", extra)
    mark_pod_running(world.emulator, NAMESPACE, "standard-x1")
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, "standard-x1"))
    p = world.pass_(spec=spec, status=status, annotations=OLD_ACTIVITY)
    await pod.converge_pod(p)

    other = world.stored("v1/pods", "standard-x1")
    assert other is None or other["metadata"].get("deletionTimestamp"), "it runs on no more"
    assert world.events.reasons == ["ExtraPodDeleted"]
    ready = p.run.condition("PodReady")
    assert ready is not None
    assert ready.reason == status["phase"]
    assert f"but pod {NAME} is still being deleted" in ready.message, "the stuck one is said"


async def test_another_pod_of_a_suspended_sandbox_that_cannot_be_stopped_is_said(
    world: World,
) -> None:
    world.emulator.create("v1/pods", ready_pod())
    mark_pod_running(world.emulator, NAMESPACE, NAME)
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, NAME))
    extra = ready_pod()
    meta = extra["metadata"]
    assert isinstance(meta, dict)
    meta.update(name="standard-x1", labels={LABEL_SANDBOX: NAME, LABEL_CLAIMED_FROM: "standard"})
    world.emulator.create("v1/pods", extra)
    world.cache.put("Pod", world.emulator.get("v1/pods", NAMESPACE, "standard-x1"))
    world.emulator.before_request.append(refuse_deleting_standard_x1)
    p = world.pass_(spec={"suspend": True}, status={"phase": "Ready"})
    await pod.converge_pod(p)

    assert world.stored("v1/pods", "standard-x1") is not None
    ready = p.run.condition("PodReady")
    assert ready is not None
    assert (ready.status, ready.reason) == ("False", sleep.STOP_FAILED)
    assert "pod standard-x1 cannot be stopped" in ready.message, "not said stopped"


async def refuse_deleting_standard_x1(request: rendering.Request) -> web.Response | None:
    """An emulator hook: the deletion of pod standard-x1 is refused, as by a webhook."""
    if request.method.value.upper() == "DELETE" and request.url.path.endswith("/standard-x1"):
        refusal = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "denied"}
        return web.json_response(refusal, status=403)
    return None


def refuse_deleting(name: str) -> Callable[[rendering.Request], Awaitable[web.Response | None]]:
    """An emulator hook: the deletion of pod ``name`` is refused, as by a webhook."""

    async def hook(request: rendering.Request) -> web.Response | None:
        if request.method.value.upper() == "DELETE" and request.url.path.endswith(f"/{name}"):
            refusal = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "denied"}
            return web.json_response(refusal, status=403)
        return None

    return hook

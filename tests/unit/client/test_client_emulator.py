"""The backend client against the emulated API server, asyncio and synchronous.

No operator runs here: each test writes the status the operator would, at the moment it
chooses, so what the client makes of every transition is deliberate and replayable.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import pytest
from kmock._internal import rendering

from craft_operator.api.models import (
    ANNOTATION_LAST_ACTIVITY,
    ANNOTATION_LIBRARY_REVISION,
    Source,
)
from craft_operator.client import (
    AdmissionDeniedError,
    AsyncSandboxClient,
    ConflictError,
    Connection,
    CrdMissingError,
    ForbiddenError,
    InvalidError,
    InvalidSpecError,
    Progress,
    SandboxClient,
    SandboxFailedError,
    SandboxGoneError,
    UnreachableError,
    WaitTimeoutError,
)
from craft_operator.client.objects import format_time
from craft_operator.reconciler.steps.library_attempt import Attempt
from tests.support.apply import FailNext
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import (
    FAST,
    NAMESPACE,
    SANDBOXES,
    USER_ID,
    all_true,
    crd_not_served,
    write_status,
)


async def watching(client: AsyncSandboxClient, count: int = 1) -> None:
    """Until the client has opened ``count`` watches (its wait is then listening)."""
    await eventually(lambda: client.requests["watch"] >= count, what="the client's watch")


def stored(emulator: KubeEmulator, name: str = "alice") -> dict[str, Any]:
    return emulator.get(SANDBOXES, NAMESPACE, name)


# -- ensure ----------------------------------------------------------------------------------


async def test_ensure_creates_then_updates_by_server_side_apply_as_the_backend(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, managers: list[str]
) -> None:
    created = await aclient.ensure(
        NAMESPACE, "alice", user_id=USER_ID, sources=["slack"], idle_timeout=timedelta(hours=1)
    )
    updated = await aclient.ensure(
        NAMESPACE, "alice", user_id=USER_ID, sources=["slack", "confluence"]
    )

    assert managers == ["onyx-backend", "onyx-backend"]
    assert updated.metadata.uid == created.metadata.uid
    spec = stored(emulator)["spec"]
    assert [source["name"] for source in spec["sources"]] == ["slack", "confluence"]
    assert spec["user"] == {"id": USER_ID, "tenantId": "public"}
    assert updated.metadata.generation == 2


async def test_ensure_refuses_an_invalid_spec_without_sending_it(
    aclient: AsyncSandboxClient,
) -> None:
    with pytest.raises(InvalidSpecError, match=r"user\.id"):
        await aclient.ensure(NAMESPACE, "alice", user_id="not-a-uuid")
    with pytest.raises(InvalidSpecError, match="sleep"):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, suspend=True)
    many_scopes = [Source(name=f"s{i}", scopes=["#" + "c" * 199] * 6) for i in range(100)]
    with pytest.raises(InvalidSpecError, match="fits in etcd"):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=many_scopes)
    assert sum(aclient.requests.values()) == 0


async def test_ensure_does_not_wake_a_sleeping_sandbox(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    await aclient.sleep(NAMESPACE, "alice")
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["jira"])

    assert stored(emulator)["spec"]["suspend"] is True


async def test_a_conflict_on_apply_is_retried(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    fault = FailNext("PATCH", 409, count=2, content_type="apply-patch")
    emulator.before_request.insert(0, fault)

    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)

    assert len(fault.failed) == 2
    assert aclient.requests["patch"] == 3
    assert stored(emulator)["spec"]["user"]["id"] == USER_ID


async def test_the_sync_client_retries_a_conflict_too(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    fault = FailNext("PATCH", 409, content_type="apply-patch")
    emulator.before_request.insert(0, fault)

    sandbox = await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)

    assert fault.failed
    assert sandbox.metadata.name == "alice"


async def test_conflicts_that_do_not_clear_end_in_a_conflict_error(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    emulator.before_request.insert(0, FailNext("PATCH", 409, count=100))

    with pytest.raises(ConflictError):
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    assert aclient.requests["patch"] == FAST.attempts


async def test_the_servers_refusal_of_an_invalid_object_is_an_invalid_error(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    other = "00000000-0000-4000-8000-000000000000"

    with pytest.raises(InvalidError, match="immutable"):
        await aclient.ensure(NAMESPACE, "alice", user_id=other)
    emulator.rejections.clear()  # refused on purpose


# -- wait_ready ------------------------------------------------------------------------------


async def test_wait_ready_watches_and_reports_every_change(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    seen: list[Progress] = []
    waiting = asyncio.create_task(
        aclient.wait_ready(NAMESPACE, "alice", timeout=30, on_progress=seen.append)
    )
    await watching(aclient)

    starting = {
        "CredentialsReady": ("True", "Minted"),
        "SkillRendered": ("True", "Rendered"),
        "PodReady": ("False", "PodStarting"),
    }
    write_status(emulator, "alice", "Provisioning", starting)
    write_status(emulator, "alice", "Provisioning", starting)  # no change: no report
    write_status(emulator, "alice", "Ready", all_true())
    ready = await waiting

    assert ready.status.phase == "Ready"
    assert [p.phase for p in seen] == [None, "Provisioning", "Ready"]
    assert seen[1].message == "Provisioning: PodReady False PodStarting: PodReady is PodStarting"
    assert [p.percent for p in seen] == [0, 33, 100]
    assert aclient.requests["get"] == 1, "a wait reads once, then only watches"


async def test_an_async_progress_callback_is_awaited(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true())
    seen: list[str] = []

    async def report(progress: Progress) -> None:
        await asyncio.sleep(0)
        seen.append(str(progress))

    await aclient.wait_ready(NAMESPACE, "alice", timeout=30, on_progress=report)

    assert seen == ["[100%] craft/alice Ready: the sandbox is ready for its agent"]


#: What the operator said of a sandbox's first spec: Ready, or Failed (a spec it refused).
EARLIER_VERDICTS = {
    "ready": ("Ready", all_true()),
    "failed": (
        "Failed",
        {"PodReady": ("False", "InvalidResources"), "Ready": ("False", "InvalidResources")},
    ),
}


@pytest.mark.parametrize("verdict", EARLIER_VERDICTS.values(), ids=EARLIER_VERDICTS.keys())
async def test_a_status_for_an_older_spec_neither_ends_nor_fails_the_wait(
    aclient: AsyncSandboxClient,
    emulator: KubeEmulator,
    verdict: tuple[str, dict[str, tuple[str, str]]],
) -> None:
    """The backend changes the spec (fixes one that failed, say) and waits: until the
    operator has looked at the new spec, the status is the old spec's, not this one's."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", *verdict)
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, sources=["slack"])  # generation 2
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient)
    assert not waiting.done()

    write_status(emulator, "alice", "Ready", all_true())
    ready = await waiting

    assert ready.status.observed_generation == 2


async def test_a_sandbox_the_policy_denies_fails_the_wait_with_the_conditions_reason(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient)
    denied = {"CredentialsReady": ("False", "PolicyDenied"), "PodReady": ("False", "PolicyDenied")}
    write_status(emulator, "alice", "Failed", denied)

    with pytest.raises(SandboxFailedError) as failure:
        await waiting

    assert (failure.value.condition_type, failure.value.reason) == (
        "CredentialsReady",
        "PolicyDenied",
    )
    assert failure.value.message == "CredentialsReady is PolicyDenied"
    assert failure.value.phase == "Failed"
    assert "kubectl describe csb alice -n craft" in str(failure.value)


async def test_the_sync_client_raises_the_same_typed_failure(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Failed", {"PodReady": ("False", "PodFailedRepeatedly")})

    with pytest.raises(SandboxFailedError) as failure:
        await asyncio.to_thread(client.wait_ready, NAMESPACE, "alice", timeout=30)

    assert (failure.value.condition_type, failure.value.reason) == (
        "PodReady",
        "PodFailedRepeatedly",
    )


@pytest.mark.parametrize(
    ("conditions", "extra", "expected"),
    [
        # A freshly minted PAT was refused too: the operator stops until the spec changes.
        (all_true(CLIValidated=("False", "AuthFailed")), {"cliAuthFailures": 2}, "AuthFailed"),
        # A library sync that retrying cannot fix, of the attempt the operator would make
        # now (no revision annotated, this pod, the configuration of the last sync).
        (
            all_true(UserLibrarySynced=("False", "LibraryTooLarge")),
            {
                "podUID": "pod-1",
                "userLibrary": {
                    "configHash": "cfg",
                    "failedAttempt": Attempt.of("", "pod-1", "cfg").key,
                },
            },
            "LibraryTooLarge",
        ),
        (all_true(PodReady=("False", "EgressNotRestricted")), {}, "EgressNotRestricted"),
        # Multi-tenant Onyx: the tenant's schema does not exist. The operator retries, but
        # only a new spec.user.tenantId or a schema someone creates ends it.
        ({"CredentialsReady": ("False", "TenantGone")}, {}, "TenantGone"),
    ],
)
async def test_a_condition_the_operator_does_not_retry_past_fails_the_wait(
    aclient: AsyncSandboxClient,
    emulator: KubeEmulator,
    conditions: dict[str, tuple[str, str]],
    extra: dict[str, Any],
    expected: str,
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    conditions = {**conditions, "Ready": ("False", expected)}
    write_status(emulator, "alice", "Provisioning", conditions, **extra)

    with pytest.raises(SandboxFailedError) as failure:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)

    assert failure.value.reason == expected


async def test_a_condition_the_operator_retries_does_not_fail_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    first_refusal = all_true(CLIValidated=("False", "AuthFailed"), Ready=("False", "AuthFailed"))
    write_status(emulator, "alice", "Provisioning", first_refusal, cliAuthFailures=1)

    with pytest.raises(WaitTimeoutError) as timeout:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=0.5)

    assert "CLIValidated False AuthFailed" in str(timeout.value)


async def test_a_suspended_sandbox_fails_the_wait_until_woken(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    await aclient.sleep(NAMESPACE, "alice")
    write_status(emulator, "alice", "Suspended", {"PodReady": ("False", "Suspended")})

    with pytest.raises(SandboxFailedError, match="Suspended"):
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)


async def test_a_sandbox_asleep_on_idleness_fails_the_wait_until_touched(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=1))
    asleep = all_true(PodReady=("False", "Sleeping"), Ready=("False", "NotReady"))
    write_status(emulator, "alice", "Sleeping", asleep, sleepingSince="2025-01-01T00:00:00Z")

    with pytest.raises(SandboxFailedError, match=r"touch\(\) or wake\(\)") as failure:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)

    assert (failure.value.phase, failure.value.reason) == ("Sleeping", "Sleeping")
    assert aclient.requests["watch"] == 0, "not left to the wait's timeout"


async def test_a_sandbox_asleep_on_idleness_and_touched_since_is_waited_for(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=1))
    asleep = all_true(PodReady=("False", "Sleeping"), Ready=("False", "NotReady"))
    write_status(emulator, "alice", "Sleeping", asleep, sleepingSince="2025-01-01T00:00:00Z")
    await aclient.touch(NAMESPACE, "alice")  # the operator wakes it, but has not yet
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await eventually(lambda: aclient.requests["watch"] >= 1 or waiting.done(), what="the wait")

    write_status(emulator, "alice", "Ready", all_true())

    assert (await waiting).status.phase == "Ready"


async def test_a_touch_now_wakes_a_sandbox_that_fell_asleep_by_a_clock_ahead_of_ours(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """The operator's clock 30 s ahead: a touch() now is before status.sleepingSince, and
    the sandbox slept on while wait_ready() told the backend to touch() it first."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=1))
    ahead = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
    asleep = all_true(PodReady=("False", "Sleeping"), Ready=("False", "NotReady"))
    write_status(emulator, "alice", "Sleeping", asleep, sleepingSince=format_time(ahead))

    stamped = await aclient.touch(NAMESPACE, "alice")

    assert stamped > ahead
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await eventually(lambda: aclient.requests["watch"] >= 1 or waiting.done(), what="the wait")
    assert not waiting.done(), "the touched sandbox is waited for, not given up on"
    waiting.cancel()


async def test_a_touch_at_a_given_moment_is_stored_as_it_is(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """Activity the backend replays (``at=``) says when it was, not that the user is here."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=1))
    slept = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    asleep = all_true(PodReady=("False", "Sleeping"), Ready=("False", "NotReady"))
    write_status(emulator, "alice", "Sleeping", asleep, sleepingSince=format_time(slept))
    before = slept - timedelta(minutes=5)

    assert await aclient.touch(NAMESPACE, "alice", at=before) == before


async def test_a_wait_times_out_saying_where_the_sandbox_was(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Pending", {"CredentialsReady": ("False", "UserNotFound")})

    with pytest.raises(WaitTimeoutError) as timeout:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=0.3)

    assert isinstance(timeout.value, TimeoutError)
    assert "CredentialsReady False UserNotFound" in timeout.value.last


async def test_a_deleted_sandbox_ends_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient)
    emulator.remove(SANDBOXES, NAMESPACE, "alice")

    with pytest.raises(SandboxGoneError):
        await waiting


@pytest.mark.parametrize("operation", ["notify_library_changed", "sleep"])
async def test_the_triggers_waits_end_for_a_sandbox_being_deleted_as_wait_ready_does(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, operation: str
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    finalizer = {"metadata": {"finalizers": ["craft.onyx.app/finalizer"]}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", finalizer)  # the operator's: it stays a while
    waiting = asyncio.create_task(
        getattr(aclient, operation)(NAMESPACE, "alice", wait=True, timeout=30)
    )
    await watching(aclient)

    await aclient.delete(NAMESPACE, "alice")

    with pytest.raises(SandboxGoneError, match="is being deleted"):
        await waiting


async def test_a_dropped_watch_is_resumed_from_the_last_version(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient)
    emulator.cut_watches()
    await watching(aclient, 2)
    write_status(emulator, "alice", "Ready", all_true())

    await waiting
    assert aclient.requests["get"] == 1, "resumed from its version, without reading again"


def expire_first_watch() -> Any:
    """A hook answering the first watch with the 410 Expired event a real server sends."""
    answered: list[int] = []

    async def hook(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        if request.params.get("watch") != "true" or answered:
            return None
        answered.append(1)
        status = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired"}
        return aiohttp.web.Response(
            text=json.dumps({"type": "ERROR", "object": status}) + "\n",
            content_type="application/json",
        )

    return hook


async def test_an_expired_watch_reads_the_sandbox_again(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    emulator.before_request.insert(0, expire_first_watch())
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient, 2)
    write_status(emulator, "alice", "Ready", all_true())

    await waiting
    assert aclient.requests["get"] == 2


async def test_a_watch_the_server_fails_is_retried(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    fault = FailNext("GET", 500, count=2, watch=True)
    emulator.before_request.insert(0, fault)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching(aclient, 3)
    write_status(emulator, "alice", "Ready", all_true())

    await waiting
    assert len(fault.failed) == 2


# -- the annotations -------------------------------------------------------------------------


async def test_touch_records_activity_and_never_moves_it_backwards(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    later = datetime.now(UTC).replace(microsecond=999)

    assert await aclient.touch(NAMESPACE, "alice", at=later) == later.replace(microsecond=0)
    assert await aclient.touch(NAMESPACE, "alice", at=later - timedelta(hours=1)) == later.replace(
        microsecond=0
    )
    annotations = stored(emulator)["metadata"]["annotations"]
    assert annotations[ANNOTATION_LAST_ACTIVITY] == later.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert aclient.requests["patch"] == 2, "the second touch wrote nothing"


async def test_touch_rereads_and_retries_when_the_sandbox_changed_meanwhile(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    fault = FailNext("PATCH", 409, content_type="merge-patch")
    emulator.before_request.insert(0, fault)

    await aclient.touch(NAMESPACE, "alice")

    assert fault.failed
    assert aclient.requests["get"] == 2, "read again after the conflict"
    assert ANNOTATION_LAST_ACTIVITY in stored(emulator)["metadata"]["annotations"]


async def test_touch_never_moves_back_activity_another_writer_stored_after_its_read(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """Two backend workers touch at once: the write of the earlier moment, made on what it
    read before the later one landed, must not overwrite it (the sandbox would fall
    asleep early)."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    now = datetime.now(UTC).replace(microsecond=0)
    later = format_time(now + timedelta(minutes=5))
    raced: list[str] = []

    async def another_touch_lands_first(request: rendering.Request) -> None:
        if request.method.value.upper() == "PATCH" and not raced:
            raced.append(later)
            annotations = {ANNOTATION_LAST_ACTIVITY: later}
            emulator.patch(
                SANDBOXES, NAMESPACE, "alice", {"metadata": {"annotations": annotations}}
            )

    emulator.before_request.insert(0, another_touch_lands_first)

    stored_after = await aclient.touch(NAMESPACE, "alice", at=now)

    assert raced
    assert stored(emulator)["metadata"]["annotations"][ANNOTATION_LAST_ACTIVITY] == later
    assert format_time(stored_after) == later


async def test_notify_library_changed_sets_a_new_revision_each_time(
    client: SandboxClient, emulator: KubeEmulator
) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)

    first = await asyncio.to_thread(client.notify_library_changed, NAMESPACE, "alice")
    second = await asyncio.to_thread(client.notify_library_changed, NAMESPACE, "alice")
    named = await asyncio.to_thread(client.notify_library_changed, NAMESPACE, "alice", "42")

    assert first != second
    assert named == "42"
    assert stored(emulator)["metadata"]["annotations"][ANNOTATION_LIBRARY_REVISION] == "42"


# -- sleep, wake, delete, reading ------------------------------------------------------------


async def test_sleep_suspends_and_wake_resumes_past_the_moment_it_slept(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, idle_timeout=timedelta(hours=1))
    await aclient.sleep(NAMESPACE, "alice")
    assert stored(emulator)["spec"]["suspend"] is True
    # The operator's clock is ahead of ours: it slept "later" than our now.
    slept = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    write_status(emulator, "alice", "Suspended", sleepingSince=slept.strftime("%Y-%m-%dT%H:%M:%SZ"))

    await aclient.wake(NAMESPACE, "alice")

    sandbox = stored(emulator)
    assert sandbox["spec"]["suspend"] is False
    activity = sandbox["metadata"]["annotations"][ANNOTATION_LAST_ACTIVITY]
    assert datetime.fromisoformat(activity) > slept


async def test_sleep_waits_until_the_operator_stopped_the_pod(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    sleeping = asyncio.create_task(aclient.sleep(NAMESPACE, "alice", wait=True, timeout=30))
    await watching(aclient)
    assert not sleeping.done()

    suspended = {"PodReady": ("False", "Suspended")}
    write_status(emulator, "alice", "Suspended", suspended, podUID=None)  # the pod is gone
    await sleeping
    assert await aclient.pod_name(NAMESPACE, "alice") is None


async def test_sleep_of_a_sandbox_the_policy_denies_ends_once_the_operator_saw_the_suspend(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """A denied sandbox stays Failed, its pod deleted: never Suspended, yet stopped."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    denied = {
        "CredentialsReady": ("False", "PolicyDenied"),
        "PodReady": ("False", "PolicyDenied"),
    }
    write_status(emulator, "alice", "Failed", denied)
    sleeping = asyncio.create_task(aclient.sleep(NAMESPACE, "alice", wait=True, timeout=30))
    await watching(aclient)
    assert not sleeping.done(), "that status is for the spec before the suspend"

    write_status(emulator, "alice", "Failed", denied)  # the operator's pass: still no pod

    await sleeping
    assert await aclient.pod_name(NAMESPACE, "alice") is None


async def test_sleep_of_a_sandbox_whose_spec_the_operator_cannot_read_fails_at_once(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """The operator acts on no part of a spec it cannot read, suspend included: the pod
    runs on, so waiting for it to stop would only run out the timeout."""
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")
    sleeping = asyncio.create_task(aclient.sleep(NAMESPACE, "alice", wait=True, timeout=30))
    await watching(aclient)

    invalid = {"PodReady": ("False", "InvalidSpec")}
    write_status(emulator, "alice", "Failed", invalid, podName="alice", podUID="u1")

    with pytest.raises(SandboxFailedError) as caught:
        await asyncio.wait_for(sleeping, 5)
    assert caught.value.reason == "InvalidSpec"
    assert "cannot stop its pod" in str(caught.value)


async def test_status_and_pod_name_are_typed(client: SandboxClient, emulator: KubeEmulator) -> None:
    await asyncio.to_thread(client.ensure, NAMESPACE, "alice", user_id=USER_ID)
    assert await asyncio.to_thread(client.pod_name, NAMESPACE, "alice") is None
    write_status(emulator, "alice", "Ready", all_true(), podName="alice", podUID="u1")

    status = await asyncio.to_thread(client.status, NAMESPACE, "alice")

    assert status.phase == "Ready"
    assert status.pod_uid == "u1"
    assert await asyncio.to_thread(client.pod_name, NAMESPACE, "alice") == "alice"


async def test_delete_waits_for_the_operators_finalizer(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    finalizer = {"metadata": {"finalizers": ["craft.onyx.app/finalizer"]}}
    emulator.patch(SANDBOXES, NAMESPACE, "alice", finalizer)
    deleting = asyncio.create_task(aclient.delete(NAMESPACE, "alice", wait=True, timeout=30))
    await watching(aclient)
    assert not deleting.done()

    emulator.patch(SANDBOXES, NAMESPACE, "alice", {"metadata": {"finalizers": None}})

    assert await deleting is True
    assert emulator.find(SANDBOXES, NAMESPACE, "alice") is None
    assert await aclient.delete(NAMESPACE, "alice") is False


async def test_delete_waits_for_the_sandbox_it_deleted_not_for_its_name_to_be_free(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    old = await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    recreated: list[str] = []

    async def another_worker_ensures_it_again(
        request: rendering.Request,
    ) -> aiohttp.web.StreamResponse | None:
        if request.method.value.upper() != "DELETE" or recreated:
            return None
        answer = await emulator.serve_unhooked(request)
        body = {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": {"name": "alice", "namespace": NAMESPACE},
            "spec": {"user": {"id": USER_ID}},
        }
        recreated.append(emulator.create(SANDBOXES, body)["metadata"]["uid"])
        return answer

    emulator.before_request.insert(0, another_worker_ensures_it_again)

    assert await aclient.delete(NAMESPACE, "alice", wait=True, timeout=5) is True
    assert recreated
    assert recreated[0] != old.metadata.uid


# -- connection trouble and refusals ---------------------------------------------------------


async def test_throttling_and_server_errors_are_retried(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    throttled = FailNext("GET", 429, retry_after="0")
    broken = FailNext("GET", 503, count=2)
    emulator.before_request[:0] = [throttled, broken]

    await aclient.status(NAMESPACE, "alice")

    assert len(throttled.failed) == 1
    assert len(broken.failed) == 2


async def test_a_forbidden_request_names_the_grant_and_the_role_to_bind(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    emulator.before_request.insert(0, FailNext("PATCH", 403))

    with pytest.raises(ForbiddenError) as refused:
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)

    text = str(refused.value)
    assert 'patch craftsandboxes.craft.onyx.app "alice" in namespace "craft"' in text
    assert "manifests/backend/rbac.yaml" in text
    assert aclient.requests["patch"] == 1, "a refusal is not retried"


@pytest.mark.parametrize(
    "denial",
    [
        'craftsandboxes.craft.onyx.app "alice" is forbidden: ValidatingAdmissionPolicy '
        "'craft-sandbox-policy' with binding 'craft-sandbox-policy' denied request: "
        "spec.image attacker/sandbox:1 is not allowed by the CraftSandboxPolicy",
        'admission webhook "validate.example.com" denied the request: no',
        'craftsandboxes.craft.onyx.app "alice" is forbidden: exceeded quota: sandboxes',
    ],
    ids=["policy", "webhook", "quota"],
)
async def test_a_refusal_at_admission_is_not_taken_for_missing_rbac(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, denial: str
) -> None:
    """Both are 403: the backend must tell "not allowed" from "our Role is missing"."""
    emulator.before_request.insert(0, FailNext("PATCH", 403, message=denial))

    with pytest.raises(AdmissionDeniedError) as refused:
        await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)

    assert not isinstance(refused.value, ForbiddenError)
    assert denial in str(refused.value)
    assert "rbac.yaml" not in str(refused.value)
    assert aclient.requests["patch"] == 1, "a refusal is not retried"


async def test_a_cluster_without_the_crd_says_to_install_it(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    emulator.before_request.insert(0, crd_not_served)

    with pytest.raises(CrdMissingError, match="CRD is not installed"):
        await aclient.status(NAMESPACE, "alice")


async def test_an_unreachable_server_says_where_it_looked() -> None:
    connection = Connection(server="http://127.0.0.1:9", insecure=True, source="kubeconfig x")
    async with AsyncSandboxClient(connection, retry=FAST) as client:
        with pytest.raises(UnreachableError, match=r"127\.0\.0\.1:9 \(kubeconfig x\)"):
            await client.status(NAMESPACE, "alice")


async def test_notify_can_wait_until_the_revision_is_synced(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), userLibrary={"observedRevision": "6"})
    notifying = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "7", wait=True, timeout=30)
    )
    await watching(aclient)
    assert not notifying.done()

    write_status(emulator, "alice", "Ready", all_true(), userLibrary={"observedRevision": "7"})

    assert await notifying == "7"


async def test_a_revision_whose_sync_fails_for_good_fails_the_notify_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    # An older revision already failed for good: that is not this revision's failure.
    too_large = all_true(UserLibrarySynced=("False", "LibraryTooLarge"))
    write_status(emulator, "alice", "Provisioning", too_large, userLibrary={"failedAttempt": "r6"})
    notifying = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "7", wait=True, timeout=30)
    )
    await watching(aclient)
    assert not notifying.done()

    write_status(emulator, "alice", "Provisioning", too_large, userLibrary={"failedAttempt": "r7"})

    with pytest.raises(SandboxFailedError) as failure:
        await notifying
    assert (failure.value.condition_type, failure.value.reason) == (
        "UserLibrarySynced",
        "LibraryTooLarge",
    )

"""wait_ready and a failed library sync: only the current attempt's failure fails the wait.

The operator keys a failure that retrying cannot fix by the revision, the pod and the
configuration it was for (``status.userLibrary.failedAttempt``), and keeps it, with
UserLibrarySynced False, while it runs the next attempt after any of the three changed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from craft_operator.api.models import UserLibrary
from craft_operator.client import AsyncSandboxClient, Progress, SandboxFailedError
from craft_operator.reconciler.steps.library_attempt import Attempt
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import NAMESPACE, USER_ID, all_true, write_status

TOO_LARGE = all_true(UserLibrarySynced=("False", "LibraryTooLarge"), Ready=("False", "NotReady"))
#: A sync that could not write the library volume (full): retried only once it has grown.
FULL = all_true(UserLibrarySynced=("False", "DestinationFailed"), Ready=("False", "NotReady"))


def failed(revision: str, pod: str, *, config: str = "cfg") -> dict[str, object]:
    """The status the operator writes after the attempt (revision, pod, config) failed for
    good, the last successful sync having used ``cfg``."""
    return {
        "podUID": pod,
        "userLibrary": {
            "observedRevision": "r5",
            "configHash": "cfg",
            "failedAttempt": Attempt.of(revision, pod, config).key,
        },
    }


async def watching_or_done(client: AsyncSandboxClient, waiting: asyncio.Task[Any]) -> None:
    """Until the wait watches (it did not fail on what it read) or ended."""
    await eventually(lambda: client.requests["watch"] >= 1 or waiting.done(), what="the wait")


def reported(seen: list[Progress], reason: str) -> bool:
    """Whether the last progress report has a condition with ``reason``."""
    return bool(seen) and any(c.reason == reason for c in seen[-1].conditions)


async def sandbox_at_revision(client: AsyncSandboxClient, revision: str) -> None:
    await client.ensure(NAMESPACE, "alice", user_id=USER_ID)
    await client.notify_library_changed(NAMESPACE, "alice", revision)


@pytest.mark.parametrize(
    "earlier",
    [
        pytest.param(failed("r6", "pod-1"), id="after-a-new-revision"),
        pytest.param(failed("r7", "pod-0") | {"podUID": "pod-1"}, id="after-a-wake"),
        pytest.param(failed("r7", "pod-1", config="old"), id="after-a-new-configuration"),
    ],
)
async def test_a_library_failure_kept_from_an_earlier_attempt_does_not_fail_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator, earlier: dict[str, object]
) -> None:
    await sandbox_at_revision(aclient, "r7")
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **earlier)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching_or_done(aclient, waiting)
    assert not waiting.done(), "the operator is retrying: the wait goes on"

    synced = {"podUID": "pod-1", "userLibrary": {"observedRevision": "r7", "configHash": "cfg"}}
    write_status(emulator, "alice", "Ready", all_true(), **synced)

    assert (await waiting).status.phase == "Ready"


async def test_a_library_failure_of_the_current_attempt_fails_the_wait_at_once(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await sandbox_at_revision(aclient, "r7")
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed("r7", "pod-1"))

    with pytest.raises(SandboxFailedError) as failure:
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)

    assert (failure.value.condition_type, failure.value.reason) == (
        "UserLibrarySynced",
        "LibraryTooLarge",
    )
    assert aclient.requests["watch"] == 0


async def test_the_retry_failing_for_good_too_fails_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await sandbox_at_revision(aclient, "r7")
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed("r6", "pod-1"))
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching_or_done(aclient, waiting)
    assert not waiting.done()

    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed("r7", "pod-1"))

    with pytest.raises(SandboxFailedError, match="LibraryTooLarge"):
        await waiting


async def test_the_previous_revisions_failure_recorded_during_the_wait_does_not_fail_it(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await sandbox_at_revision(aclient, "r6")
    syncing = all_true(UserLibrarySynced=("False", "Syncing"), Ready=("False", "NotReady"))
    last_sync = {"podUID": "pod-1", "userLibrary": {"observedRevision": "r5", "configHash": "cfg"}}
    write_status(emulator, "alice", "Provisioning", syncing, **last_sync)
    await aclient.notify_library_changed(NAMESPACE, "alice", "r7")  # uploaded while r6 syncs
    seen: list[Progress] = []
    waiting = asyncio.create_task(
        aclient.wait_ready(NAMESPACE, "alice", timeout=30, on_progress=seen.append)
    )
    await watching_or_done(aclient, waiting)

    # r6's sync ends after r7 was annotated: failed for good, keyed by r6.
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed("r6", "pod-1"))
    await eventually(lambda: reported(seen, "LibraryTooLarge") or waiting.done(), what="it")
    assert not waiting.done(), "the operator syncs r7 next: the wait goes on"

    synced = {"podUID": "pod-1", "userLibrary": {"observedRevision": "r7", "configHash": "cfg"}}
    write_status(emulator, "alice", "Ready", all_true(), **synced)

    assert (await waiting).status.phase == "Ready"


async def test_a_first_library_sync_that_failed_for_good_fails_the_wait_at_once(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await sandbox_at_revision(aclient, "r7")
    never_synced = {
        "podUID": "pod-1",
        "userLibrary": {"failedAttempt": Attempt.of("r7", "pod-1", "cfg").key},
    }
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **never_synced)

    with pytest.raises(SandboxFailedError, match="LibraryTooLarge"):
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)
    assert aclient.requests["watch"] == 0, "not left to the wait's timeout"


def library_volume(requested: str, capacity: str) -> dict[str, object]:
    """``status.libraryVolume``: the size the PVC requests and the bound volume's."""
    return {
        "libraryVolume": {
            "claimName": "alice-library",
            "requested": requested,
            "capacity": capacity,
            "phase": "Bound",
        }
    }


async def test_a_full_library_volume_being_grown_does_not_fail_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    """The failure's key has no size: the operator keeps it until the volume has grown,
    then syncs again."""
    await sandbox_at_revision(aclient, "r7")
    grown = UserLibrary(mode="Job", size="50Gi")
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID, user_library=grown)
    pending = library_volume(requested="50Gi", capacity="20Gi")
    write_status(emulator, "alice", "Provisioning", FULL, **failed("r7", "pod-1"), **pending)
    waiting = asyncio.create_task(aclient.wait_ready(NAMESPACE, "alice", timeout=30))
    await watching_or_done(aclient, waiting)
    assert not waiting.done(), "the operator syncs again once the volume has grown"

    synced = {"podUID": "pod-1", "userLibrary": {"observedRevision": "r7", "configHash": "cfg"}}
    grown_to = library_volume(requested="50Gi", capacity="50Gi")
    write_status(emulator, "alice", "Ready", all_true(), **synced, **grown_to)

    assert (await waiting).status.phase == "Ready"


async def test_a_full_library_volume_not_asked_to_grow_fails_the_wait_at_once(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await sandbox_at_revision(aclient, "r7")
    full = library_volume(requested="20Gi", capacity="20Gi")
    write_status(emulator, "alice", "Provisioning", FULL, **failed("r7", "pod-1"), **full)

    with pytest.raises(SandboxFailedError, match="DestinationFailed"):
        await aclient.wait_ready(NAMESPACE, "alice", timeout=30)
    assert aclient.requests["watch"] == 0

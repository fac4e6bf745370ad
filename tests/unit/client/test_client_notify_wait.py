"""notify_library_changed(wait=True): which sync answers the caller, and when none will.

The operator syncs the whole library prefix as the revision annotation stands when a sync
starts, and records that value as ``status.userLibrary.observedRevision``. Two uploads in
quick succession annotate two revisions; the sync of the later one covers both uploads.
"""

from __future__ import annotations

import asyncio

import pytest

from craft_operator.client import AsyncSandboxClient, SandboxFailedError
from craft_operator.reconciler.steps.library_attempt import Attempt
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.unit.client.conftest import NAMESPACE, USER_ID, all_true, write_status


def synced(revision: str) -> dict[str, object]:
    """The status fields of a successful sync of ``revision`` into pod-1."""
    return {"podUID": "pod-1", "userLibrary": {"observedRevision": revision, "configHash": "c"}}


async def test_a_later_revisions_sync_ends_the_wait_of_the_revision_it_replaced(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), **synced("r0"))
    first = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "r1", wait=True, timeout=30)
    )
    await eventually(lambda: aclient.requests["watch"] >= 1, what="the first upload's wait")

    await aclient.notify_library_changed(NAMESPACE, "alice", "r2")  # the second upload
    await asyncio.sleep(0.1)
    assert not first.done(), "r2 is annotated, not synced yet"
    write_status(emulator, "alice", "Ready", all_true(), **synced("r2"))

    assert await first == "r1"


def failed_for_good(revision: str) -> dict[str, object]:
    """The status fields after the sync of ``revision`` into pod-1 failed for good, the
    last successful sync having synced r0."""
    return {
        "podUID": "pod-1",
        "userLibrary": {
            "observedRevision": "r0",
            "configHash": "c",
            "failedAttempt": Attempt.of(revision, "pod-1", "c").key,
        },
    }


TOO_LARGE = all_true(UserLibrarySynced=("False", "LibraryTooLarge"), Ready=("False", "NotReady"))


async def test_the_previous_revisions_failure_does_not_fail_the_wait_of_the_revision_after_it(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    await aclient.notify_library_changed(NAMESPACE, "alice", "r1")
    write_status(emulator, "alice", "Ready", all_true(), **synced("r0"))  # r1 syncing
    second = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "r2", wait=True, timeout=30)
    )
    await eventually(lambda: aclient.requests["watch"] >= 1 or second.done(), what="the wait")

    # r1's sync, started before r2 was annotated, ends: failed for good, keyed by r1.
    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed_for_good("r1"))
    await asyncio.sleep(0.2)
    assert not second.done(), "the operator syncs r2 next: the wait goes on"
    write_status(emulator, "alice", "Ready", all_true(), **synced("r2"))

    assert await second == "r2"


async def test_a_failure_of_the_sync_the_annotation_asks_for_fails_the_wait_naming_the_sync(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), **synced("r0"))
    waiting = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "r1", wait=True, timeout=30)
    )
    await eventually(lambda: aclient.requests["watch"] >= 1 or waiting.done(), what="the wait")

    write_status(emulator, "alice", "Provisioning", TOO_LARGE, **failed_for_good("r1"))

    with pytest.raises(SandboxFailedError) as failure:
        await waiting
    assert (failure.value.condition_type, failure.value.reason) == (
        "UserLibrarySynced",
        "LibraryTooLarge",
    )
    assert "cannot sync its library" in str(failure.value)


async def test_a_sandbox_with_no_bucket_fails_the_wait_at_once(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    no_bucket = all_true(UserLibrarySynced=("True", "NotConfigured"))
    write_status(emulator, "alice", "Ready", no_bucket, podUID="pod-1")

    with pytest.raises(SandboxFailedError) as failure:
        await aclient.notify_library_changed(NAMESPACE, "alice", "r1", wait=True, timeout=30)

    assert (failure.value.condition_type, failure.value.reason) == (
        "UserLibrarySynced",
        "NotConfigured",
    )
    assert "cannot sync its library" in str(failure.value)
    assert "UserLibrarySynced is True, NotConfigured" in str(failure.value)
    assert aclient.requests["watch"] == 0, "not left to the wait's timeout"


async def test_a_revision_the_operator_would_not_sync_is_refused_before_anything_is_written(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    writes = len(emulator.writes())
    with pytest.raises(ValueError, match="at most 1,024 characters, not 1,025"):
        await aclient.notify_library_changed(NAMESPACE, "alice", "r" * 1025)
    assert len(emulator.writes()) == writes
    assert await aclient.notify_library_changed(NAMESPACE, "alice", "r" * 1024) == "r" * 1024


async def test_a_sync_that_failed_on_a_full_library_volume_being_grown_does_not_fail_the_wait(
    aclient: AsyncSandboxClient, emulator: KubeEmulator
) -> None:
    await aclient.ensure(NAMESPACE, "alice", user_id=USER_ID)
    write_status(emulator, "alice", "Ready", all_true(), **synced("r0"))
    waiting = asyncio.create_task(
        aclient.notify_library_changed(NAMESPACE, "alice", "r1", wait=True, timeout=30)
    )
    await eventually(lambda: aclient.requests["watch"] >= 1 or waiting.done(), what="the wait")

    full = all_true(UserLibrarySynced=("False", "DestinationFailed"), Ready=("False", "NotReady"))
    growing = {"libraryVolume": {"requested": "50Gi", "capacity": "20Gi"}}
    write_status(emulator, "alice", "Provisioning", full, **failed_for_good("r1"), **growing)
    await asyncio.sleep(0.2)
    assert not waiting.done(), "the operator syncs r1 again once the volume has grown"
    write_status(emulator, "alice", "Ready", all_true(), **synced("r1"))

    assert await waiting == "r1"

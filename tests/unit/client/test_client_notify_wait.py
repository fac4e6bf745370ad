"""notify_library_changed(wait=True): which sync answers the caller, and when none will.

The operator syncs the whole library prefix as the revision annotation stands when a sync
starts, and records that value as ``status.userLibrary.observedRevision``. Two uploads in
quick succession annotate two revisions; the sync of the later one covers both uploads.
"""

from __future__ import annotations

import asyncio

import pytest

from craft_operator.client import AsyncSandboxClient, SandboxFailedError
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

"""UserLibrarySynced: nothing to sync without a bucket; a sync once per revision and pod."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from craft_operator.api.models import MAX_LIBRARY_REVISION, ConditionStatus, UserLibraryStatus
from craft_operator.api.status_codec import dump_status
from craft_operator.library import resolve_location
from craft_operator.library.errors import DestinationUnwritableError, ExecFailedError
from craft_operator.library.record import TAMPERED, Distrust
from craft_operator.library.sync import SyncResult
from craft_operator.reconciler.pod_guard import PodChangedError
from craft_operator.reconciler.step import WAITING_MESSAGE, Pass
from craft_operator.reconciler.steps import credentials, library
from craft_operator.reconciler.steps.library_attempt import attempt_for
from craft_operator.status import ConditionState
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.steps.conftest import (
    CANARY,
    NAME,
    NOW,
    UID,
    AnsweringLibrary,
    World,
)

pytestmark = pytest.mark.unit

POD = {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "pod-1"}}


def ready_pass(world: World, **body: object) -> Pass:
    p = world.pass_(**body)
    p.pod = POD
    return p


def pass_after_a_sync(world: World, condition: ConditionState, recorded: UserLibraryStatus) -> Pass:
    """A pass over a sandbox whose status records ``recorded``, a sync into its pod ``pod-1``
    with its present configuration, and has ``condition`` as its UserLibrarySynced."""
    first = ready_pass(world)
    location = resolve_location(
        first.sandbox.spec.user_library, first.sandbox.spec.user, world.services.settings
    )
    attempt = attempt_for(first.sandbox, location, "pod-1")
    first.run.set(condition)
    first.run.status.user_library = recorded.model_copy(
        update={"pod_uid": "pod-1", "config_hash": attempt.config}
    )
    return ready_pass(world, status=dump_status(first.run.status))


async def test_without_a_bucket_the_library_is_empty_and_ready(world: World) -> None:
    p = ready_pass(world)
    assert await library.sync_library(p) is None
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "NotConfigured")


async def test_a_sync_starts_in_the_pool_and_the_pass_does_not_wait(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    p = ready_pass(world)
    assert await library.sync_library(p) is None
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert condition.reason == "Syncing"
    assert world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")
    await world.services.library_pool.close()


async def test_a_library_synced_for_this_revision_and_pod_is_left_alone(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    synced = ConditionState.true("UserLibrarySynced", "Synced", "3 files")
    p = pass_after_a_sync(world, synced, UserLibraryStatus())
    assert await library.sync_library(p) is None
    assert not world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")
    assert p.run.touched == set()


async def test_a_sync_recorded_before_a_pass_stopped_early_stands_as_it_was_said(
    make_world: Callable[..., World],
) -> None:
    # A pass stopped at an earlier row (the database down) left the condition Unknown; the
    # status still records this sync, so the True condition comes back as the sync said it.
    world = make_world(s3_bucket="onyx-user-files")
    waiting = ConditionState.unknown("UserLibrarySynced", "Waiting", WAITING_MESSAGE)
    recorded = UserLibraryStatus(last_sync_time=NOW, files=3, bytes=10, skipped=2)
    p = pass_after_a_sync(world, waiting, recorded)
    assert await library.sync_library(p) is None
    assert not world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Synced")
    assert condition.message == "3 files, 10 bytes; 2 unsafe keys skipped"


async def test_a_sync_that_failed_since_is_not_taken_back_as_synced_by_a_pass_that_waited(
    make_world: Callable[..., World],
) -> None:
    # The status records a sync of this revision into this pod, but the library was synced
    # again since (after an egress refusal, say) and that failed, maybe half way.
    world = make_world(s3_bucket="onyx-user-files")
    waiting = ConditionState.unknown("UserLibrarySynced", "Waiting", WAITING_MESSAGE)
    recorded = UserLibraryStatus(last_sync_time=NOW, files=3, last_error="S3 is unreachable")
    p = pass_after_a_sync(world, waiting, recorded)

    await library.sync_library(p)

    assert not p.run.condition_is("UserLibrarySynced", ConditionStatus.TRUE)
    assert world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")
    await world.services.library_pool.close()


class CapturingLibrary:
    """The library port, keeping what each sync was given instead of syncing."""

    def __init__(self) -> None:
        self.checks: list[Any] = []
        self.called = asyncio.Event()

    async def sync(self, *args: object, check: Any = None, **kwargs: object) -> SyncResult:
        self.checks.append(check)
        self.called.set()
        raise ExecFailedError("not synced here")

    async def forget(self, uid: str) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_a_queued_sync_execs_into_no_pod_that_took_its_pods_name_meanwhile(
    make_world: Callable[..., World],
) -> None:
    """A sync may wait for a free slot long after its pass; if the sandbox's pod went and
    another sandbox's took the name (a claimed pool pod's name is anyone's to give a new
    sandbox), the other user must not receive this user's library."""
    world = make_world(s3_bucket="onyx-user-files")
    capturing = CapturingLibrary()
    world.services.library = capturing  # type: ignore[misc]
    owner = {"kind": "CraftSandbox", "name": NAME, "uid": UID, "controller": True}
    mine = {"metadata": {**POD["metadata"], "resourceVersion": "1", "ownerReferences": [owner]}}
    world.cache.put("Pod", mine)
    p = ready_pass(world)
    p.pod = mine
    await library.sync_library(p)
    await asyncio.wait_for(capturing.called.wait(), 5)
    (check,) = capturing.checks
    check()  # still the pod it was read as: the sync may exec

    world.cache.remove("Pod", {"metadata": {**mine["metadata"], "resourceVersion": "2"}})
    theirs = {"kind": "CraftSandbox", "name": "mallory", "uid": "uid-m", "controller": True}
    world.cache.put(
        "Pod",
        {
            "metadata": {
                **POD["metadata"],
                "uid": "pod-9",
                "resourceVersion": "3",
                "ownerReferences": [theirs],
            }
        },
    )
    with pytest.raises(PodChangedError):
        check()
    await world.services.library_pool.close()


class UnwritablePodLibrary:
    """The library port, as if the agent had made the manifest in its pod a directory (or
    whatever else ``message`` says)."""

    def __init__(
        self,
        message: str = "the library in pod ns/pod cannot be written: .craft-sync/manifest is "
        "not a regular file the sync can write",
    ) -> None:
        self.syncs = 0
        self.message = message

    async def sync(self, *args: object, **kwargs: object) -> SyncResult:
        self.syncs += 1
        raise DestinationUnwritableError(self.message)

    async def forget(self, uid: str) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_a_library_the_pod_cannot_take_is_reported_and_not_sent_again(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    unwritable = UnwritablePodLibrary()
    world.services.library = unwritable  # type: ignore[misc]
    pool = world.services.library_pool
    first = ready_pass(world)
    await library.sync_library(first)
    for _ in range(100):
        if not pool.busy(first.run.key, UID):
            break
        await asyncio.sleep(0.01)

    collecting = ready_pass(world, status=dump_status(first.run.status))
    await library.sync_library(collecting)
    later = ready_pass(world, status=dump_status(collecting.run.status))
    await library.sync_library(later)

    condition = collecting.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "DestinationUnwritable")
    assert "manifest is not a regular file" in condition.message
    assert "retried" not in condition.message
    assert unwritable.syncs == 1
    assert not pool.busy(later.run.key, UID)
    await pool.close()


async def collected(world: World, first: Pass) -> Pass:
    """The pass after ``first``'s sync ended in the pool: it collects the outcome."""
    for _ in range(500):
        if not world.services.library_pool.busy(first.run.key, UID):
            break
        await asyncio.sleep(0.01)
    collecting = ready_pass(world, status=dump_status(first.run.status))
    await library.sync_library(collecting)
    return collecting


async def test_a_failed_sync_is_counted_by_its_reason_for_the_alert(
    make_world: Callable[..., World],
) -> None:
    """CraftLibrarySyncFailing reads craft_user_library_sync_errors_total by reason."""
    world = make_world(s3_bucket="onyx-user-files")
    world.services.library = UnwritablePodLibrary()  # type: ignore[misc]
    first = ready_pass(world)
    await library.sync_library(first)

    await collected(world, first)

    registry = world.services.metrics.registry
    errors = {"reason": "DestinationUnwritable"}
    assert registry.get_sample_value("craft_user_library_sync_errors_total", errors) == 1
    assert registry.get_sample_value("craft_user_library_sync_duration_seconds_count") == 0


async def test_a_successful_sync_adds_what_it_sent_and_its_duration_to_the_metrics(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    result = a_result(bytes_transferred=512, duration_seconds=1.5)
    world.services.library = AnsweringLibrary(result)
    first = ready_pass(world)
    await library.sync_library(first)

    collecting = await collected(world, first)

    condition = collecting.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Synced")
    registry = world.services.metrics.registry
    assert registry.get_sample_value("craft_user_library_sync_bytes_total") == 512
    assert registry.get_sample_value("craft_user_library_sync_duration_seconds_sum") == 1.5
    assert (
        registry.get_sample_value("craft_user_library_sync_errors_total", {"reason": "Other"}) == 0
    )


async def test_a_sync_error_quoting_pieces_of_the_pat_is_withheld_from_status_and_events(
    make_world: Callable[..., World],
) -> None:
    # The agent names files after pieces of its token and makes them unremovable: the
    # sync's error quotes what rm printed about them.
    world = make_world(s3_bucket="onyx-user-files")
    secret = CANARY.removeprefix("onyx_pat_")
    printed = f"rm: cannot remove '{secret[:12]}': Permission denied; rm: '{secret[12:]}'"
    world.services.library = UnwritablePodLibrary(printed)  # type: ignore[misc]
    first = ready_pass(world)
    await credentials.ensure_pat(first)
    await library.sync_library(first)
    for _ in range(500):
        if not world.services.library_pool.busy(first.run.key, UID):
            break
        await asyncio.sleep(0.01)
    collecting = ready_pass(world, status=dump_status(first.run.status))
    await credentials.ensure_pat(collecting)
    world.events.posted.clear()
    await library.sync_library(collecting)

    condition = collecting.run.condition("UserLibrarySynced")
    assert condition is not None
    assert condition.reason == "DestinationUnwritable"
    assert "output withheld: it contained the PAT" in condition.message
    events = [message for _, _, message in world.events.posted]
    said = [condition.message, str(collecting.run.status.user_library), *events]
    for text in said:
        assert secret[:12] not in text
        assert secret[12:] not in text


REVISION = "craft.onyx.app/user-library-revision"


async def test_a_revision_too_long_to_record_is_refused_once_and_the_next_one_synced(
    make_world: Callable[..., World],
) -> None:
    # The revision goes into the status, and onto a sync Job whose annotations the API
    # server bounds: one near that bound would have every Job refused, retried for ever.
    world = make_world(s3_bucket="onyx-user-files")
    too_long = {REVISION: "r" * (MAX_LIBRARY_REVISION + 1)}
    p = ready_pass(world, annotations=too_long)
    await library.sync_library(p)
    condition = p.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "RevisionTooLong")
    assert "1,025 characters" in condition.message
    assert world.events.reasons == ["LibraryRevisionTooLong"]
    assert not world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")

    again = ready_pass(world, annotations=too_long, status=dump_status(p.run.status))
    await library.sync_library(again)
    assert world.events.reasons == ["LibraryRevisionTooLong"], "said once"
    assert not world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")

    at_most = {REVISION: "r" * MAX_LIBRARY_REVISION}
    fixed = ready_pass(world, annotations=at_most, status=dump_status(again.run.status))
    await library.sync_library(fixed)
    assert world.services.library_pool.busy(p.run.key, p.sandbox.metadata.uid or "")
    await world.services.library_pool.close()


@pytest.mark.parametrize(
    ("annotations", "spec", "pod_uid"),
    [
        ({}, {}, "pod-2"),
        ({REVISION: "2"}, {}, "pod-1"),
        ({}, {"userLibrary": {"exclude": ["*.tmp"]}}, "pod-1"),
        ({}, {"userLibrary": {"disabledPaths": ["drafts"]}}, "pod-1"),
        ({}, {"userLibrary": {"prefix": "elsewhere/"}}, "pod-1"),
    ],
    ids=["a new pod", "a new revision", "a new exclude", "a newly disabled path", "a new prefix"],
)
async def test_a_synced_library_is_synced_again_for_a_new_pod_revision_or_configuration(
    make_world: Callable[..., World],
    annotations: dict[str, str],
    spec: dict[str, Any],
    pod_uid: str,
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    synced = ConditionState.true("UserLibrarySynced", "Synced", "3 files")
    done = pass_after_a_sync(world, synced, UserLibraryStatus(last_sync_time=NOW))
    p = ready_pass(world, annotations=annotations, spec=spec, status=dump_status(done.run.status))
    p.pod = {"metadata": {**POD["metadata"], "uid": pod_uid}}

    await library.sync_library(p)

    assert world.services.library_pool.busy(p.run.key, UID)
    await world.services.library_pool.close()


def a_result(
    distrust: Distrust | None = None,
    *,
    bytes_transferred: int = 40,
    duration_seconds: float = 0.1,
) -> SyncResult:
    return SyncResult(
        files=3,
        bytes=30,
        bytes_transferred=bytes_transferred,
        copied=3,
        deleted=0,
        skipped=(),
        excluded=0,
        duration_seconds=duration_seconds,
        distrust=distrust,
    )


class HeldLibrary:
    """The library port: every sync waits for ``release``, then ends with ``result``."""

    def __init__(self, result: SyncResult) -> None:
        self.result = result
        self.release = asyncio.Event()

    async def sync(self, *args: object, **kwargs: object) -> SyncResult:
        await self.release.wait()
        return self.result

    async def forget(self, uid: str) -> None:
        return None

    async def close(self) -> None:
        return None


async def ended(world: World, p: Pass) -> None:
    for _ in range(500):
        if not world.services.library_pool.busy(p.run.key, UID):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sync did not end")


async def test_a_sync_of_an_earlier_revision_is_not_recorded_as_the_one_asked_for_since(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    held = HeldLibrary(a_result())
    world.services.library = held  # type: ignore[misc]
    first = ready_pass(world, annotations={REVISION: "1"})
    await library.sync_library(first)
    bumped = ready_pass(world, annotations={REVISION: "2"}, status=dump_status(first.run.status))
    await library.sync_library(bumped)  # revision 1's sync still runs
    held.release.set()
    await ended(world, bumped)

    collecting = ready_pass(
        world, annotations={REVISION: "2"}, status=dump_status(bumped.run.status)
    )
    await library.sync_library(collecting)

    recorded = collecting.run.status.user_library
    assert recorded is None or recorded.observed_revision != "2"
    assert not collecting.run.condition_is("UserLibrarySynced", ConditionStatus.TRUE)
    assert world.services.library_pool.busy(collecting.run.key, UID), "revision 2 is synced"
    await world.services.library_pool.close()


async def test_a_library_copied_again_because_the_pods_manifest_was_untrusted_says_so(
    make_world: Callable[..., World],
) -> None:
    world = make_world(s3_bucket="onyx-user-files")
    untrusted = Distrust(
        TAMPERED, "the library manifest in the pod is not the one the operator wrote"
    )
    held = HeldLibrary(a_result(untrusted))
    held.release.set()
    world.services.library = held  # type: ignore[misc]
    first = ready_pass(world)
    await library.sync_library(first)
    await ended(world, first)

    collecting = ready_pass(world, status=dump_status(first.run.status))
    await library.sync_library(collecting)

    condition = collecting.run.condition("UserLibrarySynced")
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "ResyncedInFull")
    assert "(ManifestTampered)" in condition.message
    assert "LibraryManifestUntrusted" in world.events.reasons

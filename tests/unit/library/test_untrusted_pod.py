"""The pod's copy of the library manifest is only a hint: the agent can rewrite it, make it
huge, or stop the commands the sync runs, and the operator neither trusts nor waits on it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from craft_operator.kube.exec import ExecOutputTooLargeError, ExecResult, Stdin
from craft_operator.kube.exec_local import LocalExec
from craft_operator.library import SyncResult, sync_user_library_exec
from craft_operator.library.errors import (
    DestinationError,
    DestinationUnwritableError,
    ExecTimedOutError,
)
from craft_operator.library.manifest import parse_manifest
from craft_operator.library.record import TAMPERED, TOO_LARGE, SyncRecord
from craft_operator.library.transfer import APPLY_SCRIPT, COMMAND_MAX_OUTPUT, UPLOAD_SCRIPT
from tests.support.s3 import S3Server

from .conftest import Bucket
from .test_sync_exec import put_in_archive_tier

pytestmark = [pytest.mark.s3]

NAMESPACE, POD, POD_UID = "craft", "sandbox-a", "pod-uid-1"
CAP = 64 * 1024


class MemoryRecords:
    """The operator's record, kept where the pod cannot reach it (here: in the test)."""

    def __init__(self) -> None:
        self.record: SyncRecord | None = None
        self.saves = 0

    async def load(self) -> SyncRecord | None:
        return self.record

    async def save(self, record: SyncRecord) -> None:
        self.record = record
        self.saves += 1


def library_dir(pods: LocalExec) -> Path:
    return pods.workspace(NAMESPACE, POD) / "user_library"


def manifest_of(pods: LocalExec) -> Path:
    return library_dir(pods) / ".craft-sync" / "manifest"


async def sync(
    bucket: Bucket,
    transport: object,
    records: MemoryRecords,
    *,
    exec_timeout: float = 30.0,
    pod_uid: str = POD_UID,
) -> SyncResult:
    return await sync_user_library_exec(
        store=bucket.store,
        bucket=bucket.name,
        prefix=bucket.prefix,
        exec_transport=transport,  # type: ignore[arg-type]
        namespace=NAMESPACE,
        pod=POD,
        container="sandbox",
        timeout_seconds=exec_timeout,
        manifest_max_bytes=CAP,
        records=records,
        pod_uid=pod_uid,
    )


@pytest.fixture
def synced_twice(bucket: Bucket, s3_server: S3Server) -> Bucket:
    bucket.put("a.txt", b"aaa")
    bucket.put("notes/b.md", b"bbbb")
    return bucket


async def test_an_untouched_pod_is_synced_from_the_record_and_only_changes_are_sent(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    records = MemoryRecords()
    first = await sync(synced_twice, pods, records)
    synced_twice.put("c.txt", b"c")

    second = await sync(synced_twice, pods, records)

    assert (first.copied, first.distrust) == (2, None)
    assert (second.copied, second.deleted, second.distrust) == (1, 0, None)
    assert records.record is not None
    assert set(records.record.entries) == {
        "a.txt",
        "notes/b.md",
        "c.txt",
    }


async def test_a_manifest_over_the_cap_is_not_read_and_the_library_is_copied_again(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    (library_dir(pods) / "a.txt").write_bytes(b"agent's edit")
    manifest_of(pods).write_bytes(b"x" * (CAP + 1))

    result = await sync(synced_twice, pods, records)

    assert result.distrust is not None
    assert result.distrust.reason == TOO_LARGE
    assert str(CAP) in result.distrust.message
    assert result.copied == 2
    assert (library_dir(pods) / "a.txt").read_bytes() == b"aaa"
    assert manifest_of(pods).stat().st_size < CAP  # replaced by the operator's own
    again = await sync(synced_twice, pods, records)
    assert (again.copied, again.distrust) == (0, None)


async def test_a_pod_that_ignores_head_still_cannot_make_the_operator_read_more(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    class EndlessManifest:
        """The pod answers the manifest read with far more than it was asked for."""

        def __init__(self) -> None:
            self.calls: list[int | None] = []

        async def run(
            self,
            namespace: str,
            pod: str,
            container: str,
            argv: Sequence[str],
            *,
            stdin: Stdin = None,
            timeout: float | None = None,  # noqa: ASYNC109
            max_output_bytes: int | None = None,
        ) -> ExecResult:
            if "head" in argv[2]:
                self.calls.append(max_output_bytes)
                argv = ["sh", "-c", "yes manifest"]
            return await pods.run(
                namespace,
                pod,
                container,
                argv,
                stdin=stdin,
                timeout=timeout,
                max_output_bytes=max_output_bytes,
            )

    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    transport = EndlessManifest()

    result = await sync(synced_twice, transport, records)

    assert result.distrust is not None
    assert result.distrust.reason == TOO_LARGE
    # The pod's stdout is cut off just past the cap (plus room for stderr), not at 64 MiB.
    limit = CAP + 1 + COMMAND_MAX_OUTPUT
    assert transport.calls
    assert all(cap is not None and cap <= limit for cap in transport.calls)


async def test_a_tampered_manifest_gets_a_full_resync_never_a_crash(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    synced_twice.delete("notes/b.md")
    (library_dir(pods) / "a.txt").unlink()
    # The agent claims a.txt is current, hides notes/b.md, and adds junk of every kind.
    manifest_of(pods).write_bytes(
        b'craft-library-manifest 1\n+\t3\t"x"\ta.txt\n-\t\t\tnotes/b.md\n'
        + b"+\t99999999999999999999\tetag\t../../etc/passwd\n\xff\xfe\x00junk\n"
    )

    result = await sync(synced_twice, pods, records)

    assert result.distrust is not None
    assert result.distrust.reason == TAMPERED
    assert (result.copied, result.deleted) == (1, 1)  # a.txt again; notes/b.md is gone
    assert (library_dir(pods) / "a.txt").read_bytes() == b"aaa"
    assert not (library_dir(pods) / "notes" / "b.md").exists()
    assert b"passwd" not in manifest_of(pods).read_bytes()


async def test_a_new_pod_gets_a_full_sync_whatever_manifest_it_shows(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    records = MemoryRecords()
    await sync(synced_twice, pods, records)

    result = await sync(synced_twice, pods, records, pod_uid="pod-uid-2")

    assert (result.copied, result.distrust) == (2, None)


async def test_a_new_pod_is_synced_by_one_exec_and_its_manifest_is_never_read(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    manifest_of(pods).write_bytes(b"/etc/passwd\t1\tx\n" * 1000)  # left by someone else
    calls_before = len(pods.calls)

    result = await sync(synced_twice, pods, records, pod_uid="pod-uid-2")

    assert len(pods.calls) == calls_before + 1
    assert pods.calls[-1].stdin_bytes == result.bytes_transferred
    assert (result.copied, result.distrust) == (2, None)
    assert b"passwd" not in manifest_of(pods).read_bytes()
    assert (await sync(synced_twice, pods, records, pod_uid="pod-uid-2")).copied == 0


async def test_a_new_pods_manifest_is_replaced_even_with_nothing_to_copy_and_raises_no_alarm(
    bucket: Bucket, pods: LocalExec
) -> None:
    # The library is empty; the pod shows a manifest the operator did not write.
    manifest_of(pods).parent.mkdir(parents=True)
    manifest_of(pods).write_bytes(b'craft-library-manifest 1\n+\t1\t"x"\tleft-over.txt\n')
    records = MemoryRecords()

    first = await sync(bucket, pods, records)
    second = await sync(bucket, pods, records)

    assert (first.distrust, second.distrust) == (None, None)
    assert b"left-over" not in manifest_of(pods).read_bytes()


async def test_a_new_pods_first_sync_cut_off_is_resumed_without_a_tamper_alarm(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    class CutOff:
        """The upload lands (its pending paths appended to the manifest), then the pod
        stops answering before any file is moved into place."""

        async def run(
            self, namespace: str, pod: str, container: str, argv: Sequence[str], **kw: Any
        ) -> ExecResult:
            upload_only = [*argv[:2], UPLOAD_SCRIPT, *argv[3:]]
            await pods.run(namespace, pod, container, upload_only, stdin=kw.get("stdin"))
            raise ExecOutputTooLargeError("stand-in for a lost connection", limit=0)

    records = MemoryRecords()
    with pytest.raises(Exception, match="stand-in"):
        await sync(synced_twice, CutOff(), records)

    result = await sync(synced_twice, pods, records)

    assert result.distrust is None
    assert result.copied == 2
    assert not list((library_dir(pods) / ".craft-sync").glob("staging*"))
    assert (await sync(synced_twice, pods, records)).copied == 0


async def test_a_first_sync_lost_before_its_upload_reached_the_pod_still_leaves_a_whole_manifest(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    class Unreachable:
        """The pod stops answering before the upload reaches it: nothing lands."""

        async def run(self, *args: object, **kw: object) -> ExecResult:
            raise ExecOutputTooLargeError("stand-in for a lost connection", limit=0)

    records = MemoryRecords()
    with pytest.raises(Exception, match="stand-in"):
        await sync(synced_twice, Unreachable(), records)
    assert not manifest_of(pods).exists()

    result = await sync(synced_twice, pods, records)

    assert (result.copied, result.distrust) == (2, None)
    manifest = parse_manifest(manifest_of(pods).read_bytes())
    assert manifest.valid, "the manifest starts with its header"
    assert set(manifest.entries) == {"a.txt", "notes/b.md"}


async def test_an_interrupted_sync_is_resumed_from_the_record_without_a_tamper_alarm(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    class StoppedApply:
        """The pod stops answering once the upload has landed, before any file is moved."""

        async def run(
            self,
            namespace: str,
            pod: str,
            container: str,
            argv: Sequence[str],
            *,
            stdin: Stdin = None,
            timeout: float | None = None,  # noqa: ASYNC109
            max_output_bytes: int | None = None,
        ) -> ExecResult:
            if argv[2] == UPLOAD_SCRIPT + APPLY_SCRIPT:
                upload_only = [*argv[:2], UPLOAD_SCRIPT, *argv[3:]]
                await pods.run(namespace, pod, container, upload_only, stdin=stdin)
                raise ExecOutputTooLargeError("stand-in for any failure", limit=0)
            return await pods.run(namespace, pod, container, argv, stdin=stdin, timeout=timeout)

    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    synced_twice.put("a.txt", b"new a")
    with pytest.raises(Exception, match="stand-in"):
        await sync(synced_twice, StoppedApply(), records)

    result = await sync(synced_twice, pods, records)

    assert result.distrust is None
    assert result.copied == 1
    assert (library_dir(pods) / "a.txt").read_bytes() == b"new a"


class AnswerLost:
    """Every command runs to its end in the pod, but its answer never reaches the operator
    (the connection dropped after the exit)."""

    def __init__(self, pods: LocalExec) -> None:
        self.pods = pods

    async def run(
        self, namespace: str, pod: str, container: str, argv: Sequence[str], **kw: Any
    ) -> ExecResult:
        result = await self.pods.run(namespace, pod, container, argv, **kw)
        assert result.exit_code == 0
        raise ExecOutputTooLargeError("stand-in for a connection lost after the exit", limit=0)


class FailingFinalSave(MemoryRecords):
    """The database is away for the save that ends a sync (the one after the upload)."""

    async def save(self, record: SyncRecord) -> None:
        if self.saves % 2 == 1 and not getattr(self, "failed", False):
            self.failed = True
            raise DestinationError("the database is unavailable (stand-in)", retryable=True)
        await super().save(record)


@pytest.mark.parametrize("first_sync", [True, False], ids=["new pod", "incremental"])
async def test_a_sync_that_landed_but_whose_answer_was_lost_is_not_sent_again(
    bucket: Bucket, pods: LocalExec, first_sync: bool
) -> None:
    records = MemoryRecords()
    if not first_sync:
        bucket.put("kept.txt", b"kept")
        await sync(bucket, pods, records)
    for index in range(20):
        bucket.put(f"docs/{index:02d}.bin", bytes([index]) * 10_000)
    with pytest.raises(Exception, match="stand-in"):
        await sync(bucket, AnswerLost(pods), records)
    assert len(list((library_dir(pods) / "docs").iterdir())) == 20

    again = await sync(bucket, pods, records)

    assert (again.copied, again.deleted, again.distrust) == (0, 0, None)
    assert again.bytes_transferred == 0
    assert records.record is not None
    assert not records.record.pending
    bucket.put("docs/00.bin", b"changed")
    assert (await sync(bucket, pods, records)).copied == 1


async def test_a_sync_that_landed_but_whose_end_was_not_recorded_is_not_sent_again(
    bucket: Bucket, pods: LocalExec
) -> None:
    for index in range(20):
        bucket.put(f"docs/{index:02d}.bin", bytes([index]) * 10_000)
    records = FailingFinalSave()
    with pytest.raises(DestinationError, match="stand-in"):
        await sync(bucket, pods, records)

    again = await sync(bucket, pods, records)

    assert (again.copied, again.bytes_transferred) == (0, 0)
    assert records.record is not None
    assert set(records.record.entries) == {f"docs/{index:02d}.bin" for index in range(20)}


async def test_a_stopped_exec_process_times_out_in_seconds_not_the_whole_sync_budget(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    class StoppedUpload:
        """The agent stops the upload's shell (SIGSTOP): it never reads its stdin."""

        async def run(
            self,
            namespace: str,
            pod: str,
            container: str,
            argv: Sequence[str],
            *,
            stdin: Stdin = None,
            timeout: float | None = None,  # noqa: ASYNC109
            max_output_bytes: int | None = None,
        ) -> ExecResult:
            if stdin is not None:
                argv = [argv[0], argv[1], "kill -STOP $$\n" + argv[2], *argv[3:]]
            return await pods.run(namespace, pod, container, argv, stdin=stdin, timeout=timeout)

    synced_twice.put("big.bin", b"\x00" * 2_000_000)

    with pytest.raises(ExecTimedOutError) as raised:
        await sync(synced_twice, StoppedUpload(), MemoryRecords(), exec_timeout=1.0)

    assert raised.value.reason == "ExecTimedOut"
    assert raised.value.retryable
    assert "did not finish within" in raised.value.message


async def test_a_pod_that_takes_its_upload_a_little_at_a_time_is_abandoned_once_behind_the_pace(
    synced_twice: Bucket, pods: LocalExec
) -> None:
    """Not at the command's limit, which grows with the upload (here 21 s; up to 30 min):
    the agent would hold one of the operator's few sync slots that long on every retry."""

    class TricklingUpload:
        """The upload's shell is fed 4 KiB every 20 ms (about 200 KB/s), whatever comes."""

        async def run(
            self,
            namespace: str,
            pod: str,
            container: str,
            argv: Sequence[str],
            *,
            stdin: Stdin = None,
            timeout: float | None = None,  # noqa: ASYNC109
            max_output_bytes: int | None = None,
        ) -> ExecResult:
            if stdin is not None:
                trickle = (
                    "script=$1; shift; while :; do dd bs=4096 count=1 status=none; sleep 0.02; "
                    'done | sh -c "$script" "$@"'
                )
                argv = ["sh", "-c", trickle, "sh", argv[2], *argv[3:]]
            return await pods.run(namespace, pod, container, argv, stdin=stdin, timeout=timeout)

    synced_twice.put("big.bin", b"\x00" * 20_000_000)

    with pytest.raises(ExecTimedOutError) as raised:
        await sync(synced_twice, TricklingUpload(), MemoryRecords(), exec_timeout=1.0)

    assert raised.value.reason == "ExecTimedOut"
    assert raised.value.retryable
    assert "slower than 1000000 bytes/s after the first 1s" in raised.value.message
    assert not (library_dir(pods) / "big.bin").exists()


def manifest_made_a_directory(state: Path) -> None:
    (state / "manifest").unlink()
    (state / "manifest").mkdir()


def manifest_made_a_fifo(state: Path) -> None:
    (state / "manifest").unlink()
    os.mkfifo(state / "manifest")


def state_made_a_file(state: Path) -> None:
    shutil.rmtree(state)
    state.write_bytes(b"")


def manifest_made_read_only(state: Path) -> None:
    (state / "manifest").chmod(0o444)


def state_made_read_only(state: Path) -> None:
    state.chmod(0o555)


AS_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the modes say")


@pytest.mark.parametrize(
    "break_state",
    [
        manifest_made_a_directory,
        manifest_made_a_fifo,
        state_made_a_file,
        pytest.param(manifest_made_read_only, marks=AS_ROOT),
        pytest.param(state_made_read_only, marks=AS_ROOT),
    ],
)
async def test_a_state_the_agent_made_unwritable_fails_the_sync_before_its_upload_is_read(
    synced_twice: Bucket, pods: LocalExec, break_state: Callable[[Path], None]
) -> None:
    """Appending to the manifest fails only once tar has read the whole archive, and every
    retry would download the library again and send it through the API server: the upload
    checks first, and the failure is final (until the revision, the pod or the
    configuration changes)."""
    records = MemoryRecords()
    await sync(synced_twice, pods, records)
    synced_twice.put("large.bin", b"L" * 2_000_000)
    break_state(library_dir(pods) / ".craft-sync")

    with pytest.raises(DestinationUnwritableError) as raised:
        await sync(synced_twice, pods, records)

    assert raised.value.retryable is False
    assert raised.value.reason == "DestinationUnwritable"
    assert ".craft-sync" in raised.value.message
    assert pods.calls[-1].stdin_bytes < 200_000
    assert not (library_dir(pods) / "large.bin").exists()


async def test_an_archived_file_kept_through_a_full_resync_is_still_deleted_when_s3_drops_it(
    bucket: Bucket, pods: LocalExec
) -> None:
    # The kept copy is unknown after the resync: the manifest must keep saying so (a "?"
    # line), or the next sync, planning from that manifest, forgets the file for ever.
    records = MemoryRecords()
    bucket.put("a.txt", b"aaa")
    bucket.put("old.pdf", b"cold")
    await sync(bucket, pods, records)
    bucket.client.put_object(  # a lifecycle rule: same bytes, same ETag, now in Glacier
        Bucket=bucket.name, Key=bucket.prefix + "old.pdf", Body=b"cold", StorageClass="GLACIER"
    )
    with manifest_of(pods).open("ab") as manifest:
        manifest.write(b"# the agent's\n")
    assert (await sync(bucket, pods, records)).distrust is not None
    await sync(bucket, pods, records)

    bucket.delete("old.pdf")
    await sync(bucket, pods, records)

    assert not (library_dir(pods) / "old.pdf").exists()


async def test_a_new_pods_library_with_an_object_in_an_archive_tier_gets_a_whole_manifest(
    bucket: Bucket, pods: LocalExec
) -> None:
    # The sync starts again without the object: from the record as it was, not from the one
    # the stopped attempt saved (which would append to a manifest the pod does not have).
    records = MemoryRecords()
    bucket.put("notes.md", b"# notes\n")
    put_in_archive_tier(bucket, "old/2019.pdf", b"cold")

    result = await sync(bucket, pods, records)

    assert result.files == 1
    assert parse_manifest(manifest_of(pods).read_bytes()).valid
    assert records.record is not None
    assert not records.record.pending


async def test_a_new_object_in_an_archive_tier_alone_leaves_the_record_as_the_pod_is(
    bucket: Bucket, pods: LocalExec
) -> None:
    # The only change is an object S3 refuses: the attempt that found it saved a pending
    # record naming it; the attempt without it has nothing to do, and must say so.
    records = MemoryRecords()
    bucket.put("notes.md", b"# notes\n")
    await sync(bucket, pods, records)
    put_in_archive_tier(bucket, "old/2019.pdf", b"cold")

    result = await sync(bucket, pods, records)

    assert (result.copied, result.files) == (0, 1)
    assert records.record is not None
    assert not records.record.pending
    assert set(records.record.entries) == {"notes.md"}

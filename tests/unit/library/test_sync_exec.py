"""Exec-mode sync against moto's S3 server, through the local exec double with real tar."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import re
from collections.abc import AsyncIterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from craft_operator.kube.exec import ExecResult, ExecUnavailableError, Stdin
from craft_operator.kube.exec_local import LocalExec
from craft_operator.library import (
    ExecFailedError,
    LibraryCapExceededError,
    LibraryConfigError,
    S3ObjectChangedError,
    S3UnavailableError,
    SyncCaps,
    SyncResult,
    sync_user_library_exec,
    sync_user_library_local,
)
from craft_operator.library.errors import DestinationError, S3ObjectArchivedError
from craft_operator.library.paths import MAX_PATH_BYTES, SkipReason
from craft_operator.library.plan import S3Object
from craft_operator.library.sync import MAX_REFUSED_ARCHIVED
from craft_operator.library.tarstream import BLOCK
from craft_operator.library.transfer import UPLOAD_SCRIPT
from tests.support.s3 import S3Server

from .conftest import Bucket

pytestmark = [pytest.mark.s3]

NAMESPACE = "craft"
POD = "sandbox-a"
CONTAINER = "sandbox"


def library_dir(pods: LocalExec) -> Path:
    return pods.workspace(NAMESPACE, POD) / "user_library"


def files_in(root: Path) -> dict[str, bytes]:
    """Every file under root except the operator's state directory."""
    found: dict[str, bytes] = {}
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not relative.startswith(".craft-sync"):
            found[relative] = path.read_bytes()
    return found


def all_paths(root: Path) -> set[Path]:
    return set(root.rglob("*"))


async def sync(
    bucket: Bucket,
    transport: object,
    *,
    excludes: Sequence[str] = (),
    disabled: Sequence[str] = (),
    caps: SyncCaps | None = None,
) -> SyncResult:
    return await sync_user_library_exec(
        store=bucket.store,
        bucket=bucket.name,
        prefix=bucket.prefix,
        exec_transport=transport,  # type: ignore[arg-type]
        namespace=NAMESPACE,
        pod=POD,
        container=CONTAINER,
        excludes=excludes,
        disabled=disabled,
        caps=caps,
    )


async def test_first_sync_copies_every_file_into_the_pod(bucket: Bucket, pods: LocalExec) -> None:
    bucket.put("notes.md", b"# notes\n")
    bucket.put("reports/2024/q1.csv", b"a,b\n1,2\n")
    bucket.put("héllo wörld.txt", b"unicode name")

    result = await sync(bucket, pods)

    assert files_in(library_dir(pods)) == {
        "notes.md": b"# notes\n",
        "reports/2024/q1.csv": b"a,b\n1,2\n",
        "héllo wörld.txt": b"unicode name",
    }
    assert (result.copied, result.deleted, result.files) == (3, 0, 3)
    assert result.bytes == 8 + 8 + 12
    assert not list((library_dir(pods) / ".craft-sync").glob("staging*"))


async def test_a_second_sync_without_changes_sends_nothing(bucket: Bucket, pods: LocalExec) -> None:
    bucket.put("a.txt", b"a")
    await sync(bucket, pods)
    calls_before = len(pods.calls)

    result = await sync(bucket, pods)

    assert (result.copied, result.deleted, result.bytes_transferred) == (0, 0, 0)
    assert len(pods.calls) == calls_before + 1  # only the manifest was read


async def test_incremental_sync_sends_only_the_changed_file_plus_framing(
    bucket: Bucket, pods: LocalExec
) -> None:
    for index in range(20):
        bucket.put(f"docs/file-{index:02}.bin", bytes([index]) * 50_000)
    first = await sync(bucket, pods)
    bucket.put("docs/file-07.bin", b"x" * 30_000)

    second = await sync(bucket, pods)

    assert second.copied == 1
    assert files_in(library_dir(pods))["docs/file-07.bin"] == b"x" * 30_000
    # Besides the changed file: a header and padding for it, two one-line manifest
    # members (a header and a block each) and the end-of-archive blocks; nothing else.
    framing = second.bytes_transferred - 30_000
    assert 0 < framing <= 8 * BLOCK
    assert first.bytes_transferred > 20 * 50_000
    assert pods.calls[-1].stdin_bytes == second.bytes_transferred  # upload and apply: one exec


async def test_files_removed_from_s3_are_deleted_with_their_empty_directories(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("keep.txt", b"k")
    bucket.put("old/deep/gone.txt", b"g")
    await sync(bucket, pods)
    bucket.delete("old/deep/gone.txt")

    result = await sync(bucket, pods)

    assert result.deleted == 1
    assert files_in(library_dir(pods)) == {"keep.txt": b"k"}
    assert not (library_dir(pods) / "old").exists()


async def test_deletions_are_passed_as_argv_never_inside_a_script(
    bucket: Bucket, pods: LocalExec
) -> None:
    name = "$(touch pwned); rm -rf x `id`.txt"
    bucket.put(name, b"1")
    await sync(bucket, pods)
    bucket.delete(name)

    await sync(bucket, pods)

    apply_call = pods.calls[-1]
    assert name in apply_call.argv
    assert all(name not in arg for arg in apply_call.argv[:3])  # not in the sh -c script
    assert files_in(library_dir(pods)) == {}
    assert not any(Path.cwd().glob("pwned"))


async def test_excluded_and_disabled_files_are_removed_from_the_pod(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("keep/a.txt", b"a")
    bucket.put("keep/b.tmp", b"b")
    bucket.put("private/secret.txt", b"s")
    bucket.put("private/deeper/more.txt", b"m")
    bucket.put("drafts/x.md", b"x")
    await sync(bucket, pods)
    assert len(files_in(library_dir(pods))) == 5

    result = await sync(bucket, pods, excludes=["*.tmp", "drafts/"], disabled=["private"])

    assert files_in(library_dir(pods)) == {"keep/a.txt": b"a"}
    assert (result.deleted, result.excluded, result.files) == (4, 4, 1)


async def test_a_disabled_path_is_never_copied(bucket: Bucket, pods: LocalExec) -> None:
    bucket.put("private/secret.txt", b"s")
    bucket.put("public.txt", b"p")

    await sync(bucket, pods, disabled=["private/"])

    assert files_in(library_dir(pods)) == {"public.txt": b"p"}


HOSTILE_KEYS = {
    "../escape.txt": "'.' or '..' segment",
    "a/../../escape2.txt": "'.' or '..' segment",
    "/etc/cron.d/evil": "absolute path",
    "./dot.txt": "'.' or '..' segment",
    "ctrl\x01char.txt": "control character",
    "nul\x00.txt": "control character",
    "del\x7f.txt": "control character",
    "c1\u0085.txt": "control character",
    "back\\..\\slash.txt": "backslash in key",
    ("n" * 256) + ".txt": "name longer than 255 bytes",
    "/".join(["d" * 200] * 20) + "/long.txt": f"path longer than {MAX_PATH_BYTES} bytes",
    ".craft-sync/manifest": "reserved name .craft-sync",
    "dup//file.txt": "collides with another key after normalisation",
    "cafe\u0301.txt": "collides with another key after normalisation",
    "clash": "is a file where another key needs a directory",
}


async def test_hostile_keys_are_skipped_reported_and_never_written(
    bucket: Bucket, pods: LocalExec, tmp_path: Path
) -> None:
    for key in HOSTILE_KEYS:
        bucket.put(key, b"hostile")
    bucket.put("dup/file.txt", b"canonical")
    bucket.put("caf\u00e9.txt", b"nfc")
    bucket.put("clash/inside.txt", b"dir wins")
    bucket.put("fine.txt", b"ok")
    before = all_paths(tmp_path)

    result = await sync(bucket, pods)

    reasons = {item.key[len(bucket.prefix) :]: item.reason.value for item in result.skipped}
    assert reasons == HOSTILE_KEYS
    assert files_in(library_dir(pods)) == {
        "dup/file.txt": b"canonical",
        "café.txt": b"nfc",
        "clash/inside.txt": b"dir wins",
        "fine.txt": b"ok",
    }
    written = all_paths(tmp_path) - before
    library = library_dir(pods)
    assert all(
        path == library or library in path.parents or path in library.parents for path in written
    )
    assert not any(b"hostile" in path.read_bytes() for path in written if path.is_file())


async def test_a_file_over_the_per_file_cap_fails_the_sync_and_applies_nothing(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("small.txt", b"s")
    await sync(bucket, pods)
    bucket.put("small.txt", b"changed")
    bucket.put("huge.bin", b"h" * 2_000)

    with pytest.raises(LibraryCapExceededError) as raised:
        await sync(bucket, pods, caps=SyncCaps(max_file_bytes=1_000, max_total_bytes=10**9))

    assert raised.value.reason == "FileTooLarge"
    assert "huge.bin" in str(raised.value)
    assert "1000" in str(raised.value)
    assert not raised.value.retryable
    assert files_in(library_dir(pods)) == {"small.txt": b"s"}


async def test_exclude_globs_that_cost_more_cpu_than_they_may_are_said_misconfigured(
    bucket: Bucket, pods: LocalExec
) -> None:
    """Globs built to defeat RE2's fast automaton cost minutes of the operator's CPU over a
    large library: matching stops at its budget (tiny here) and the spec is to change."""
    for n in range(40):
        bucket.put("".join("ab"[(n >> bit) & 1] for bit in range(6)) * 30 + ".md", b"x")
    hostile = [f"*a{'?' * (60 + n)}c" for n in range(30)]

    with pytest.raises(LibraryConfigError) as raised:
        await sync(bucket, pods, excludes=hostile, caps=SyncCaps(max_exclude_seconds=0.001))

    assert raised.value.reason == "LibraryMisconfigured"
    assert not raised.value.retryable
    assert "more than 0.001 s of CPU" in str(raised.value)
    assert "spec.userLibrary.exclude" in str(raised.value)
    assert files_in(library_dir(pods)) == {}


async def test_an_exclude_glob_that_cannot_be_compiled_fails_once_not_for_ever(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("a.txt", b"a")

    with pytest.raises(LibraryConfigError) as raised:
        await sync(bucket, pods, excludes=["*.tmp", "[z-a]"])

    assert raised.value.reason == "LibraryMisconfigured"
    assert not raised.value.retryable, "a spec change, not a retry, cures it"
    assert "'[z-a]'" in str(raised.value)
    assert "spec.userLibrary.exclude" in str(raised.value)
    assert files_in(library_dir(pods)) == {}


async def test_a_library_over_the_total_cap_applies_nothing(
    bucket: Bucket, pods: LocalExec
) -> None:
    for index in range(5):
        bucket.put(f"f{index}", b"x" * 400)

    with pytest.raises(LibraryCapExceededError) as raised:
        await sync(bucket, pods, caps=SyncCaps(max_file_bytes=1_000, max_total_bytes=1_500))

    assert raised.value.reason == "LibraryTooLarge"
    assert raised.value.actual == 2_000
    assert files_in(library_dir(pods)) == {}


async def test_a_prefix_of_more_keys_than_ten_times_the_file_cap_is_refused_before_planning(
    bucket: Bucket, pods: LocalExec
) -> None:
    """Empty objects cost no bytes: without a count, a million of them would take the
    operator's memory and CPU to list, plan and record."""
    for index in range(25):
        bucket.put(f"empty-{index:02d}", b"")

    with pytest.raises(LibraryCapExceededError) as raised:
        await sync(bucket, pods, caps=SyncCaps(max_files=2))

    assert raised.value.reason == "LibraryTooLarge"
    assert "more than 20 keys" in str(raised.value)
    assert not raised.value.retryable
    assert files_in(library_dir(pods)) == {}


async def test_a_small_library_beside_an_excluded_tree_of_more_keys_than_files_syncs(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("main.py", b"print()")
    for index in range(12):
        bucket.put(f"node_modules/dep-{index:02d}.js", b"x")

    result = await sync(bucket, pods, excludes=["node_modules/"], caps=SyncCaps(max_files=2))

    assert result.files == 1
    assert files_in(library_dir(pods)) == {"main.py": b"print()"}


class FailingUpload:
    """Wraps the local exec double; the upload's stdin breaks after ``after`` bytes."""

    def __init__(self, inner: LocalExec, after: int) -> None:
        self.inner = inner
        self.after = after

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
        if isinstance(stdin, AsyncIterable):
            stdin = self._cut(stdin)
        return await self.inner.run(
            namespace,
            pod,
            container,
            argv,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )

    async def _cut(self, chunks: AsyncIterable[bytes]) -> AsyncIterable[bytes]:
        sent = 0
        async for chunk in chunks:
            if sent + len(chunk) > self.after:
                yield chunk[: self.after - sent]
                raise ExecUnavailableError("connection to the API server lost")
            sent += len(chunk)
            yield chunk


class FailingApply:
    """Wraps the local exec double; the ``fail_at``-th apply batch never runs."""

    def __init__(self, inner: LocalExec, fail_at: int) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.applies = 0

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
        # APPLY: sh -c SCRIPT sh ROOT STAGING FINISH N
        if len(argv) > 6 and argv[6] in ("0", "1"):
            self.applies += 1
            if self.applies == self.fail_at:
                raise ExecUnavailableError("pod stopped answering")
        return await self.inner.run(
            namespace,
            pod,
            container,
            argv,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )


async def test_an_upload_cut_midway_leaves_the_old_files_and_the_next_sync_repairs(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("a.txt", b"old a")
    bucket.put("b.txt", b"old b")
    await sync(bucket, pods)
    bucket.put("a.txt", b"new a" * 10_000)
    bucket.put("b.txt", b"new b" * 10_000)

    with pytest.raises(ExecFailedError) as raised:
        await sync(bucket, FailingUpload(pods, after=60_000))

    assert raised.value.retryable
    assert files_in(library_dir(pods)) == {"a.txt": b"old a", "b.txt": b"old b"}
    await sync(bucket, pods)
    assert files_in(library_dir(pods)) == {"a.txt": b"new a" * 10_000, "b.txt": b"new b" * 10_000}


async def test_a_sync_stopped_between_renames_leaves_whole_files_and_is_repaired(
    bucket: Bucket, pods: LocalExec, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"f{index:03}.txt" for index in range(30)]
    for name in names:
        bucket.put(name, b"v1 " + name.encode())
    await sync(bucket, pods)
    for name in names:
        bucket.put(name, b"v2 " + name.encode())
    bucket.put(names[0], b"v1 " + names[0].encode())  # back to its old content later
    # Small argv batches: the 30 renames take several exec calls.
    from craft_operator.library import transfer

    original = transfer.PodDestination.__init__

    def small_batches(self: transfer.PodDestination, *args: object, **kwargs: object) -> None:
        original(self, *args, argv_budget_bytes=200, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(transfer.PodDestination, "__init__", small_batches)
    bucket.put(names[0], b"v2 " + names[0].encode())

    with pytest.raises(ExecFailedError):
        await sync(bucket, FailingApply(pods, fail_at=2))

    on_disk = files_in(library_dir(pods))
    assert set(on_disk) == set(names)
    assert all(
        content in (b"v1 " + n.encode(), b"v2 " + n.encode()) for n, content in on_disk.items()
    )
    assert any(content.startswith(b"v1") for content in on_disk.values())
    assert any(content.startswith(b"v2") for content in on_disk.values())

    # Meanwhile a file is set back to its old content: the manifest must not trust it.
    bucket.put(names[0], b"v1 " + names[0].encode())
    repaired = await sync(bucket, pods)

    expected = {name: b"v2 " + name.encode() for name in names}
    expected[names[0]] = b"v1 " + names[0].encode()
    assert files_in(library_dir(pods)) == expected
    # Every path the stopped sync had announced is unknown, so all of them were re-sent.
    assert repaired.copied == len(names)
    assert (await sync(bucket, pods)).copied == 0


async def test_an_s3_outage_is_retryable_and_the_next_sync_succeeds(
    bucket: Bucket, pods: LocalExec, s3_server: S3Server
) -> None:
    bucket.put("a.txt", b"a")
    s3_server.stop()

    with pytest.raises(S3UnavailableError) as raised:
        await sync(bucket, pods)

    assert raised.value.retryable
    assert bucket.name in str(raised.value)
    assert files_in(library_dir(pods)) == {}
    s3_server.start()
    result = await sync(bucket, pods)
    assert result.copied == 1
    assert files_in(library_dir(pods)) == {"a.txt": b"a"}


async def test_a_library_of_many_small_files_on_a_slow_s3_is_not_the_pods_timeout(
    bucket: Bucket, tmp_path: Path
) -> None:
    # S3 answers each small GET in 100-200 ms: 10,000 notes take minutes to read, whatever
    # the pod's pace. Scaled down: 60 files at 400 ms each, about 9 in flight, is ~2.7 s of
    # waiting on S3 against a pod timeout of 1.5 s (room for a busy machine's uploads).
    names = [f"notes/{i:02d}.md" for i in range(60)]
    for name in names:
        bucket.put(name, name.encode())
    fetch = bucket.store.fetch_object

    async def slow_fetch(*args: object, **kwargs: object) -> bytes:
        await asyncio.sleep(0.4)
        return await fetch(*args, **kwargs)  # type: ignore[arg-type]

    bucket.store.fetch_object = slow_fetch  # type: ignore[method-assign]
    pods = LocalExec(root=tmp_path / "slow-s3-pods")

    result = await sync_user_library_exec(
        store=bucket.store,
        bucket=bucket.name,
        prefix=bucket.prefix,
        exec_transport=pods,
        namespace=NAMESPACE,
        pod=POD,
        container=CONTAINER,
        timeout_seconds=1.5,
    )

    assert result.copied == len(names)
    assert files_in(library_dir(pods)) == {name: name.encode() for name in names}


async def test_each_upload_unpacks_into_a_staging_directory_of_its_own(
    bucket: Bucket, pods: LocalExec
) -> None:
    """An upload the operator abandoned runs on in the pod until its stdin ends: the next
    sync's must not share a directory with it (the one's mkdir could fail on the other's,
    failing that sync)."""
    bucket.put("a.txt", b"one")
    await sync(bucket, pods)
    bucket.put("a.txt", b"two")
    await sync(bucket, pods)

    uploads = [call.argv for call in pods.calls if call.argv[2].startswith(UPLOAD_SCRIPT)]
    stagings = [argv[5] for argv in uploads]
    assert len(stagings) == 2
    assert all(re.fullmatch(r"staging\.[0-9a-f]{16}", name) for name in stagings)
    assert stagings[0] != stagings[1]
    assert not list((library_dir(pods) / ".craft-sync").glob("staging*"))
    assert files_in(library_dir(pods)) == {"a.txt": b"two"}


async def test_an_object_replaced_during_the_sync_is_retryable_and_applies_nothing(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("a.txt", b"first")
    bucket.put("b.txt", b"first")

    class ChangesDuringSync:
        """Lists the bucket, then the user uploads a new b.txt before it is read."""

        def __init__(self) -> None:
            self.inner = bucket.store

        def list_objects(self, name: str, prefix: str, *, limit: int | None = None):  # type: ignore[no-untyped-def]
            listing = self.inner.list_objects(name, prefix, limit=limit)
            bucket.put("b.txt", b"second version")
            return listing

        def open_object(self, name: str, key: str, etag: str):  # type: ignore[no-untyped-def]
            return self.inner.open_object(name, key, etag)

    with pytest.raises(S3ObjectChangedError) as raised:
        await sync_user_library_exec(
            store=ChangesDuringSync(),
            bucket=bucket.name,
            prefix=bucket.prefix,
            exec_transport=pods,
            namespace=NAMESPACE,
            pod=POD,
            container=CONTAINER,
        )

    assert raised.value.retryable
    assert files_in(library_dir(pods)) == {}
    await sync(bucket, pods)
    assert files_in(library_dir(pods)) == {"a.txt": b"first", "b.txt": b"second version"}


async def test_a_missing_pod_is_a_retryable_exec_failure(bucket: Bucket, pods: LocalExec) -> None:
    pods.missing_pods.add(f"{NAMESPACE}/{POD}")

    with pytest.raises(ExecFailedError) as raised:
        await sync(bucket, pods)

    assert raised.value.retryable
    assert f"{NAMESPACE}/{POD}" in str(raised.value)


async def test_files_appear_readable_with_the_object_time(bucket: Bucket, pods: LocalExec) -> None:
    bucket.put("a.txt", b"a")
    await sync(bucket, pods)
    status = os.stat(library_dir(pods) / "a.txt")
    assert status.st_mode & 0o777 == 0o644
    assert status.st_mtime > 0


async def test_a_file_can_become_a_directory_and_back(bucket: Bucket, pods: LocalExec) -> None:
    bucket.put("a", b"file a")
    bucket.put("x/y/z", b"deep")
    await sync(bucket, pods)
    bucket.delete("a")
    bucket.put("a/b", b"now a directory")
    bucket.delete("x/y/z")
    bucket.put("x", b"now a file")

    await sync(bucket, pods)

    assert files_in(library_dir(pods)) == {"a/b": b"now a directory", "x": b"now a file"}


async def test_a_stray_file_where_the_library_needs_a_directory_gives_way(
    bucket: Bucket, pods: LocalExec
) -> None:
    library_dir(pods).mkdir(parents=True)
    (library_dir(pods) / "docs").write_bytes(b"left by the agent")
    bucket.put("docs/guide.md", b"guide")

    await sync(bucket, pods)

    assert files_in(library_dir(pods)) == {"docs/guide.md": b"guide"}


async def test_a_directory_or_a_link_the_agent_left_where_a_library_file_goes_gives_way(
    bucket: Bucket, pods: LocalExec, tmp_path: Path
) -> None:
    """S3 wins: the file is at its path, not moved into the directory or through the link
    (a link to a directory elsewhere would take the user's file out of the library)."""
    library = library_dir(pods)
    library.mkdir(parents=True)
    (library / "notes.md").mkdir()
    (library / "notes.md" / "left").write_bytes(b"left by the agent")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (library / "report.pdf").symlink_to(elsewhere, target_is_directory=True)
    bucket.put("notes.md", b"# notes\n")
    bucket.put("report.pdf", b"%PDF")

    await sync(bucket, pods)

    assert files_in(library) == {"notes.md": b"# notes\n", "report.pdf": b"%PDF"}
    assert not (library / "report.pdf").is_symlink()
    assert list(elsewhere.iterdir()) == []


async def test_an_archived_object_does_not_keep_the_rest_of_the_library_out(
    bucket: Bucket, pods: LocalExec
) -> None:
    """A lifecycle rule moved one old file to Glacier: its GET is refused, and that failed
    every sync of the library (as S3AccessDenied, never retried)."""
    bucket.put("notes.md", b"# notes\n")
    bucket.client.put_object(
        Bucket=bucket.name, Key=bucket.prefix + "old/2019.pdf", Body=b"cold", StorageClass="GLACIER"
    )

    result = await sync(bucket, pods)

    assert files_in(library_dir(pods)) == {"notes.md": b"# notes\n"}
    assert [item.key for item in result.skipped] == [bucket.prefix + "old/2019.pdf"]


def put_in_archive_tier(bucket: Bucket, relative: str, data: bytes) -> None:
    """An object Intelligent-Tiering moved to an archive tier: listed as INTELLIGENT_TIERING
    (no listing shows the tier), its GET refused with InvalidObjectState until restored.
    moto refuses GLACIER objects' GETs so; the store's listing is made to show the class."""
    bucket.client.put_object(
        Bucket=bucket.name, Key=bucket.prefix + relative, Body=data, StorageClass="GLACIER"
    )
    store = bucket.store
    if getattr(store, "tiered", False):
        return
    store.tiered = True  # type: ignore[attr-defined]
    on_loop = store.list_objects_on_loop

    async def listed(*args: Any, **kwargs: Any) -> list[S3Object] | None:
        found = await on_loop(*args, **kwargs)
        return [replace(obj, storage_class="INTELLIGENT_TIERING") for obj in found or []]

    store.list_objects_on_loop = listed  # type: ignore[method-assign]


async def test_an_object_in_an_archive_tier_is_skipped_and_the_rest_synced(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("notes.md", b"# notes\n")
    put_in_archive_tier(bucket, "old/2019.pdf", b"cold")
    put_in_archive_tier(bucket, "old/2020.pdf", b"cold too")

    result = await sync(bucket, pods)

    assert files_in(library_dir(pods)) == {"notes.md": b"# notes\n"}
    assert {(item.key, item.reason) for item in result.skipped} == {
        (bucket.prefix + "old/2019.pdf", SkipReason.ARCHIVED),
        (bucket.prefix + "old/2020.pdf", SkipReason.ARCHIVED),
    }
    assert "archive tier" in result.skipped[0].detail


async def test_more_archived_objects_than_one_sync_skips_fail_it_naming_the_way_out(
    bucket: Bucket, pods: LocalExec
) -> None:
    bucket.put("notes.md", b"# notes\n")
    for index in range(MAX_REFUSED_ARCHIVED + 1):
        put_in_archive_tier(bucket, f"old/{index}.pdf", b"cold")

    with pytest.raises(S3ObjectArchivedError) as raised:
        await sync(bucket, pods)

    assert raised.value.lasting, "retried later: restoring an object is done on S3"
    assert raised.value.reason == "S3ObjectArchived"
    assert "spec.userLibrary.exclude" in raised.value.message
    assert "S3AccessDenied" not in raised.value.message
    assert files_in(library_dir(pods)) == {}


async def test_in_job_mode_an_object_in_an_archive_tier_is_skipped_too(
    bucket: Bucket, tmp_path: Path
) -> None:
    bucket.put("notes.md", b"# notes\n")
    put_in_archive_tier(bucket, "old/2019.pdf", b"cold")

    result = await sync_user_library_local(
        store=bucket.store, bucket=bucket.name, prefix=bucket.prefix, dest=tmp_path / "library"
    )

    assert files_in(tmp_path / "library") == {"notes.md": b"# notes\n"}
    assert [item.key for item in result.skipped] == [bucket.prefix + "old/2019.pdf"]


async def local_sync(bucket: Bucket, dest: Path, store: Any = None) -> SyncResult:
    return await sync_user_library_local(
        store=store or bucket.store, bucket=bucket.name, prefix=bucket.prefix, dest=dest
    )


async def test_in_job_mode_a_sync_stopped_between_renames_is_repaired_whatever_s3_holds_next(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from craft_operator.library import local

    destination = tmp_path / "library"
    bucket.put("a.txt", b"v1 a")
    bucket.put("b.txt", b"v1 b")
    await local_sync(bucket, destination)
    bucket.put("a.txt", b"v2 a")
    bucket.put("b.txt", b"v2 b")
    renamed: list[object] = []
    rename_into = local._rename_into

    def stopped_at_the_second(*args: Any) -> None:
        renamed.append(args)
        if len(renamed) == 2:
            raise OSError(errno.EIO, "the sync Job's pod was stopped")
        rename_into(*args)

    monkeypatch.setattr(local, "_rename_into", stopped_at_the_second)
    with pytest.raises(DestinationError):
        await local_sync(bucket, destination)
    monkeypatch.undo()
    assert files_in(destination) == {"a.txt": b"v2 a", "b.txt": b"v1 b"}

    # Meanwhile a.txt is set back to its old content: the manifest must not vouch for it.
    bucket.put("a.txt", b"v1 a")
    await local_sync(bucket, destination)

    assert files_in(destination) == {"a.txt": b"v1 a", "b.txt": b"v2 b"}


async def test_in_job_mode_a_download_shorter_than_its_listing_applies_nothing(
    bucket: Bucket, tmp_path: Path
) -> None:
    bucket.put("a.txt", b"first")
    bucket.put("b.txt", b"0123456789")

    class CutShort:
        """Serves b.txt's body cut short, as a connection closed early would."""

        def list_objects(self, name: str, prefix: str, *, limit: int | None = None):  # type: ignore[no-untyped-def]
            return bucket.store.list_objects(name, prefix, limit=limit)

        def open_object(self, name: str, key: str, etag: str):  # type: ignore[no-untyped-def]
            body = bucket.store.open_object(name, key, etag)
            if not key.endswith("b.txt"):
                return body
            data = body.read()
            body.close()
            return io.BytesIO(data[:4])

    with pytest.raises(S3ObjectChangedError):
        await local_sync(bucket, tmp_path / "library", CutShort())

    assert files_in(tmp_path / "library") == {}
    await local_sync(bucket, tmp_path / "library")
    assert files_in(tmp_path / "library") == {"a.txt": b"first", "b.txt": b"0123456789"}

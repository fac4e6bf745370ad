"""The local writer (Job mode) against a sandbox agent that plants symlinks in the volume.

In Job mode the library volume is mounted by the sandbox too, so the agent can put a
symlink anywhere under the library root, and swap a directory for one while the sync
runs. These tests play that agent: it strikes at a chosen moment of the sync (when an
object is fetched, when a download ends, on the first rename or unlink), as a process
watching the volume could. Whatever it does, nothing outside the library root is written,
chmod-ed or deleted; writes land inside the volume, or the sync fails and says why.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import shutil
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from craft_operator.library.local import MANIFEST_READ_LIMIT, LocalDestination
from craft_operator.library.plan import S3Object
from craft_operator.library.sync import SyncResult, sync_user_library_local

BUCKET = "library"
PREFIX = "public/knowledge/user/user_library/"
_real_rename = os.rename
_real_symlink = os.symlink


class Body:
    """A streamed object body that tells the agent when it is closed."""

    def __init__(self, data: bytes, on_close: Callable[[], None]) -> None:
        self._data = data
        self._on_close = on_close

    def read(self, amt: int | None = None) -> bytes:
        chunk, self._data = (
            self._data[: amt or len(self._data)],
            self._data[amt or len(self._data) :],
        )
        return chunk

    def close(self) -> None:
        self._on_close()


@dataclass
class Store:
    """An in-memory S3 prefix whose reads can trigger the agent."""

    objects: dict[str, bytes] = field(default_factory=dict)
    on_open: Callable[[], None] = lambda: None
    on_close: Callable[[], None] = lambda: None

    def list_objects(self, bucket: str, prefix: str, *, limit: int | None = None) -> list[S3Object]:
        return [
            S3Object(key=PREFIX + path, size=len(data), etag=f'"{hashlib.md5(data).hexdigest()}"')
            for path, data in sorted(self.objects.items())
        ]

    def open_object(self, bucket: str, key: str, etag: str) -> Body:
        self.on_open()
        return Body(self.objects[key.removeprefix(PREFIX)], self.on_close)


def once(action: Callable[[], None]) -> Callable[[], None]:
    """``action`` the first time only (downloads run in several threads)."""
    lock, done = threading.Lock(), [False]

    def run() -> None:
        with lock:
            if not done[0]:
                done[0] = True
                action()

    return run


def swap_for_symlink(path: Path, target: Path) -> None:
    """What the agent does: move ``path`` aside, copy its directory skeleton to ``target``
    (so every path below still resolves there), and leave a symlink to ``target``."""
    _real_rename(path, path.with_name(path.name + ".moved"))
    shutil.copytree(
        path.with_name(path.name + ".moved"),
        target,
        ignore=lambda directory, names: [n for n in names if not (Path(directory) / n).is_dir()],
        dirs_exist_ok=True,
    )
    _real_symlink(target, path)


def sync(lib: Path, store: Store) -> SyncResult:
    return asyncio.run(sync_user_library_local(store=store, bucket=BUCKET, prefix=PREFIX, dest=lib))


def files_under(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


def library(lib: Path) -> dict[str, bytes]:
    return {path: data for path, data in files_under(lib).items() if ".craft-sync" not in path}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """An /etc-like directory outside the library that the agent points symlinks at."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_bytes(b"root:x:0:0\n")
    (etc / "passwd").chmod(0o600)
    os.utime(etc / "passwd", (1_000_000, 1_000_000))
    (etc / "victim.txt").write_bytes(b"precious")
    (etc / "sub").mkdir()
    return etc


def snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry below ``directory``: mode, mtime and content (directories too)."""
    found: dict[str, tuple[int, int, bytes]] = {}
    for path in [directory, *directory.rglob("*")]:
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
        found[path.relative_to(directory).as_posix()] = (info.st_mode, int(info.st_mtime), data)
    return found


def test_a_directory_swapped_for_a_symlink_just_before_the_rename_gets_the_file_inside(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib, store = tmp_path / "lib", Store({"docs/victim.txt": b"v1"})
    sync(lib, store)
    before = snapshot(outside)
    store.objects["docs/victim.txt"] = b"v2"
    strike = once(lambda: swap_for_symlink(lib / "docs", outside))
    real_replace = os.replace

    def racing_replace(*args: Any, **kwargs: Any) -> None:
        strike()
        real_replace(*args, **kwargs)

    monkeypatch.setattr(os, "replace", racing_replace)

    sync(lib, store)

    assert snapshot(outside) == before
    assert (lib / "docs.moved" / "victim.txt").read_bytes() == b"v2"


def test_the_state_directory_swapped_for_a_symlink_during_the_download_writes_nothing_outside(
    tmp_path: Path, outside: Path
) -> None:
    lib, store = tmp_path / "lib", Store({"keep.txt": b"k"})
    sync(lib, store)
    store.objects.update({"docs/new.txt": b"new", "top.txt": b"top"})
    state_outside = outside / "state"
    store.on_open = once(lambda: swap_for_symlink(lib / ".craft-sync", state_outside))
    before = snapshot(outside)

    sync(lib, store)

    assert {path: data for path, (_, _, data) in snapshot(outside).items() if data} == {
        path: data for path, (_, _, data) in before.items() if data
    }
    assert library(lib) == {"keep.txt": b"k", "docs/new.txt": b"new", "top.txt": b"top"}


def test_a_staged_file_swapped_for_a_symlink_is_never_chmod_or_touched_through(
    tmp_path: Path, outside: Path
) -> None:
    lib = tmp_path / "lib"
    store = Store({"docs/file.txt": b"content"})

    def plant() -> None:
        for path in (lib / ".craft-sync").rglob("*"):
            if path.is_file() and not path.is_symlink() and path.name != "manifest":
                path.unlink()
                _real_symlink(outside / "passwd", path)

    store.on_close = plant
    before = snapshot(outside)

    sync(lib, store)

    assert snapshot(outside) == before


def test_a_directory_swapped_after_a_delete_prunes_nothing_outside(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib, store = tmp_path / "lib", Store({"docs/sub/old.txt": b"old", "keep.txt": b"k"})
    sync(lib, store)
    del store.objects["docs/sub/old.txt"]
    strike = once(lambda: swap_for_symlink(lib / "docs", outside))
    real_unlink = os.unlink

    def racing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        real_unlink(path, *args, **kwargs)
        if str(path).endswith("old.txt"):
            strike()

    monkeypatch.setattr(os, "unlink", racing_unlink)

    sync(lib, store)

    assert (outside / "sub").is_dir()
    assert library(lib) == {"keep.txt": b"k"}


def test_symlinks_planted_before_the_sync_are_replaced_never_followed(
    tmp_path: Path, outside: Path
) -> None:
    lib, store = (
        tmp_path / "lib",
        Store({"docs/a.txt": b"a1", "notes.txt": b"n1", "gone.txt": b"g"}),
    )
    sync(lib, store)
    before = snapshot(outside)
    shutil.rmtree(lib / "docs")
    (lib / "docs").symlink_to(outside)  # a directory component
    (lib / "notes.txt").unlink()
    (lib / "notes.txt").symlink_to(outside / "passwd")  # the file itself
    (lib / "gone.txt").unlink()
    (lib / "gone.txt").symlink_to(outside / "victim.txt")  # a file about to be deleted
    shutil.rmtree(lib / ".craft-sync")
    (lib / ".craft-sync").symlink_to(outside)  # the library root's own subdirectory
    store.objects = {"docs/a.txt": b"a2", "notes.txt": b"n2", "docs/victim.txt": b"v"}

    result = sync(lib, store)

    assert snapshot(outside) == before
    assert result.copied == 3  # no trusted manifest: everything again
    assert library(lib) == {"docs/a.txt": b"a2", "notes.txt": b"n2", "docs/victim.txt": b"v"}
    assert not (lib / "docs").is_symlink()
    assert not (lib / "notes.txt").is_symlink()


def test_a_fifo_planted_at_the_manifest_neither_blocks_the_sync_nor_is_trusted(
    tmp_path: Path,
) -> None:
    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    sync(lib, store)
    manifest = lib / ".craft-sync" / "manifest"
    manifest.unlink()
    os.mkfifo(manifest)
    store.objects["b.txt"] = b"b"
    results: list[SyncResult] = []
    # In a daemon thread: a writer that opens the FIFO would block forever, not fail.
    worker = threading.Thread(target=lambda: results.append(sync(lib, store)), daemon=True)

    worker.start()
    worker.join(timeout=60)

    assert results, "the sync blocked on the FIFO"
    assert results[0].copied == 2
    assert manifest.is_file()
    assert library(lib) == {"a.txt": b"a", "b.txt": b"b"}


def test_a_huge_manifest_planted_by_the_agent_is_not_read_into_memory_nor_trusted(
    tmp_path: Path,
) -> None:
    """A sparse file costs the agent nothing; reading it whole would cost the Job its memory."""
    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    sync(lib, store)
    manifest = lib / ".craft-sync" / "manifest"
    with manifest.open("r+b") as planted:
        planted.truncate(MANIFEST_READ_LIMIT + 1)  # sparse: no disk, all zeros
    store.objects["b.txt"] = b"b"

    assert asyncio.run(LocalDestination(lib).read_manifest()) is None

    result = sync(lib, store)

    assert result.copied == 2  # a full resync: the planted manifest said nothing
    assert manifest.stat().st_size < 1024
    assert library(lib) == {"a.txt": b"a", "b.txt": b"b"}


def nest(directory: Path, depth: int) -> Path:
    """What the agent does: ``depth`` directories one inside the other (by descriptor: the
    path soon outgrows PATH_MAX); returns the top one."""
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=descriptor)
            inner = os.open("d", os.O_RDONLY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
        with open(
            os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=descriptor), "wb"
        ) as leaf:
            leaf.write(b"x")
    finally:
        os.close(descriptor)
    return directory


def unnest(top: Path) -> None:
    """Remove what :func:`nest` made, if it is still there (pytest's own cleanup recurses)."""
    while (top / "d").is_dir():
        (top / "d").rename(top / "lifted")
        for child in (top / "lifted").iterdir():
            child.rename(top / child.name)
        (top / "lifted").rmdir()
    if top.is_dir():
        shutil.rmtree(top)


def test_a_tree_nested_deeper_than_the_recursion_limit_in_the_staging_area_is_cleared(
    tmp_path: Path,
) -> None:
    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    staging = nest(lib / ".craft-sync" / "staging", sys.getrecursionlimit() + 200)

    try:
        result = sync(lib, store)
    finally:
        unnest(staging)

    assert result.copied == 1
    assert library(lib) == {"a.txt": b"a"}
    assert not (lib / ".craft-sync" / "staging").exists()


def test_a_sync_ending_while_the_next_one_downloads_leaves_the_next_ones_staging_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Job's pod stopped at its deadline runs on until it is killed (its PID 1 ignores
    # SIGTERM), and the next Job's pod may start beside it on the same volume.
    from craft_operator.library import local

    lib = tmp_path / "lib"
    sync(lib, Store({"old.txt": b"old"}))
    earlier_deletes, earlier_may_end = threading.Event(), threading.Event()
    real_delete = local._delete

    def earlier_pauses_at_its_delete(root: int, relative: str) -> None:
        if not earlier_deletes.is_set():
            earlier_deletes.set()
            assert earlier_may_end.wait(10)
        real_delete(root, relative)

    monkeypatch.setattr(local, "_delete", earlier_pauses_at_its_delete)
    earlier: list[SyncResult] = []
    earlier_run = threading.Thread(target=lambda: earlier.append(sync(lib, Store())))
    earlier_run.start()
    assert earlier_deletes.wait(10)

    def earlier_ends() -> None:
        earlier_may_end.set()
        earlier_run.join(10)

    later = Store({"new.txt": b"new"}, on_open=once(earlier_ends))
    result = sync(lib, later)

    assert [done.deleted for done in earlier] == [1]  # the earlier one ended well too
    assert result.copied == 1
    assert library(lib) == {"new.txt": b"new"}
    assert [path.name for path in (lib / ".craft-sync").iterdir()] == ["manifest"]


def test_staging_directories_left_by_earlier_syncs_are_removed(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    for name in ("staging", "staging.0123456789abcdef"):
        (lib / ".craft-sync" / name / "sub").mkdir(parents=True)
        (lib / ".craft-sync" / name / "sub" / "00000000").write_bytes(b"half")

    result = sync(lib, Store({"a.txt": b"a"}))

    assert result.copied == 1
    assert library(lib) == {"a.txt": b"a"}
    assert [path.name for path in (lib / ".craft-sync").iterdir()] == ["manifest"]


def test_removing_a_planted_tree_unlinks_its_symlinks_and_fifos_never_following_them(
    tmp_path: Path, outside: Path
) -> None:
    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    sync(lib, store)
    before = snapshot(outside)
    (lib / "a.txt").unlink()
    planted = lib / "a.txt" / "x" / "y"  # a directory where the library's file goes
    planted.mkdir(parents=True)
    (planted / "etc").symlink_to(outside)
    (planted / "passwd").symlink_to(outside / "passwd")
    (planted.parent / "sub").symlink_to(outside / "sub")
    os.mkfifo(planted / "fifo")
    nest(planted / "deep", 50)
    store.objects["a.txt"] = b"a2"

    sync(lib, store)

    assert snapshot(outside) == before
    assert library(lib) == {"a.txt": b"a2"}


def test_a_removal_cut_off_halfway_is_finished_by_the_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    staging = lib / ".craft-sync" / "staging"
    for i in range(10):
        for j in range(4):
            (staging / f"d{i}" / f"s{j}").mkdir(parents=True)
            (staging / f"d{i}" / f"s{j}" / "f").write_text("x")
    real, renames = os.rename, [0]

    def killed_after_twenty(*args: Any, **kwargs: Any) -> None:
        renames[0] += 1
        if renames[0] > 20:
            raise KeyboardInterrupt("the Job's pod was killed")
        real(*args, **kwargs)

    monkeypatch.setattr(os, "rename", killed_after_twenty)
    with pytest.raises(KeyboardInterrupt):
        sync(lib, store)
    monkeypatch.setattr(os, "rename", real)

    result = sync(lib, store)

    assert result.copied == 1
    assert library(lib) == {"a.txt": b"a"}


def test_a_directory_refilled_as_fast_as_it_is_emptied_fails_the_sync_instead_of_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from craft_operator.library import local
    from craft_operator.library.errors import DestinationError

    lib, store = tmp_path / "lib", Store({"a.txt": b"a"})
    staging = lib / ".craft-sync" / "staging"
    staging.mkdir(parents=True)
    monkeypatch.setattr(local, "MAX_REMOVAL_STEPS", 50)
    real_unlink, made = os.unlink, [0]

    def agent_refills(name: Any, *args: Any, **kwargs: Any) -> None:
        real_unlink(name, *args, **kwargs)
        made[0] += 1
        (staging / f"again-{made[0]}").write_text("x")  # the agent writes another

    (staging / "first").write_text("x")
    monkeypatch.setattr(os, "unlink", agent_refills)

    with pytest.raises(DestinationError):
        sync(lib, store)
    assert made[0] <= 60


@pytest.mark.parametrize(
    ("error", "retryable"),
    [(errno.ENOSPC, False), (errno.EDQUOT, False), (errno.EIO, True), (errno.ESTALE, True)],
)
def test_a_full_volume_says_how_to_make_room_and_an_io_error_that_may_pass_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, retryable: bool
) -> None:
    from craft_operator.library import local
    from craft_operator.library.errors import DestinationError

    def failing(parent: int, name: str, relative: str) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(local, "_create_file", failing)

    with pytest.raises(DestinationError) as caught:
        sync(tmp_path / "lib", Store({"a.txt": b"a"}))

    assert caught.value.retryable is retryable
    full = "raise spec.userLibrary.size" in caught.value.message
    assert full is (error in (errno.ENOSPC, errno.EDQUOT))


def test_a_name_that_is_not_utf8_is_quoted_with_its_bytes_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's file names are any bytes; Python reads such a name back with a lone
    surrogate, which no status message, event or JSON could carry."""
    from craft_operator.library import local
    from craft_operator.library.errors import DestinationError

    def failing(parent: int, name: str, relative: str) -> int:
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(b"docs/\xff"))

    monkeypatch.setattr(local, "_create_file", failing)

    with pytest.raises(DestinationError) as caught:
        sync(tmp_path / "lib", Store({"a.txt": b"a"}))

    assert caught.value.message == "cannot update docs/\\xff: Permission denied"
    caught.value.message.encode("utf-8")


def test_an_io_error_reading_the_manifest_that_may_pass_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from craft_operator.library.errors import DestinationError

    def failing(self: LocalDestination) -> bytes | None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(LocalDestination, "_read_manifest", failing)

    with pytest.raises(DestinationError) as caught:
        sync(tmp_path / "lib", Store({"a.txt": b"a"}))

    assert caught.value.retryable

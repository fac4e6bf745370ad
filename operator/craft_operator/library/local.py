"""Applying a change set to a local directory (the CLI, and the sync Job in Job mode).

Same layout and order as in the pod (:mod:`craft_operator.library.destination`): new files
are downloaded into ``<root>/.craft-sync/staging``, the manifest gets its ``pending`` lines,
deletions and renames follow, and the manifest is completed last. The directory may be
shared with the sandbox (Job mode mounts it in both), so nothing here follows a symlink
found inside it: a symlink where a directory is needed is replaced by a directory.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from craft_operator.library.destination import ChangeSet
from craft_operator.library.errors import DestinationError, S3ObjectChangedError
from craft_operator.library.paths import STATE_DIR
from craft_operator.library.plan import PlannedCopy
from craft_operator.library.s3 import ObjectStore

CHUNK_BYTES = 1024 * 1024
#: Parallel downloads: for small files the latency of each GET sets the pace.
DOWNLOAD_THREADS = 8


def _remove(path: Path) -> None:
    """Remove a file, symlink or directory tree at ``path`` (never following a symlink)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _parent_inside(root: Path, relative: str, *, create: bool) -> Path | None:
    """The real directory that holds ``root/relative``, walking without following symlinks.

    With ``create``, missing directories are made and symlinks or files in the way are
    replaced; without it, ``None`` means the parent does not exist as a real directory.
    """
    current = root
    for segment in relative.split("/")[:-1]:
        current = current / segment
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            if not create:
                return None
            current.mkdir()
            continue
        if not stat.S_ISDIR(mode):
            if not create:
                return None
            current.unlink()
            current.mkdir()
    return current


def _prune_empty_parents(root: Path, relative: str) -> None:
    parts = relative.split("/")[:-1]
    while parts:
        try:
            (root / "/".join(parts)).rmdir()
        except OSError:
            return
        parts.pop()


class LocalDestination:
    """:class:`~craft_operator.library.destination.Destination` in a local directory."""

    def __init__(self, root: Path) -> None:
        """Sync into ``root`` (created if missing)."""
        self.root = root
        self._state = root / STATE_DIR
        self._staging = self._state / "staging"
        self._manifest = self._state / "manifest"

    async def read_manifest(self) -> bytes | None:
        """The manifest, or ``None`` if this directory was never synced (or it is a symlink)."""
        try:
            return await asyncio.to_thread(self._read_manifest)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise DestinationError(f"cannot read {self._manifest}: {exc.strerror}") from None

    def _read_manifest(self) -> bytes:
        descriptor = os.open(self._manifest, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as manifest:
            return manifest.read()

    async def apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        """Download, delete, rename and record ``changes``; return the bytes downloaded."""
        try:
            return await asyncio.to_thread(self._apply, changes, store, bucket)
        except OSError as exc:
            where = exc.filename or self.root
            raise DestinationError(f"cannot update {where}: {exc.strerror or exc}") from None

    def _apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        _parent_inside(self.root, f"{STATE_DIR}/x", create=True)
        _remove(self._staging)
        (self._staging / "files").mkdir(parents=True)
        with ThreadPoolExecutor(DOWNLOAD_THREADS, thread_name_prefix="library-download") as pool:
            received = sum(
                pool.map(partial(self._download, store=store, bucket=bucket), changes.copies)
            )
        self._append(changes.pending)
        for path in changes.deletes:
            parent = _parent_inside(self.root, path, create=False)
            if parent is not None:
                _remove(parent / path.rsplit("/", 1)[-1])
                _prune_empty_parents(self.root, path)
        for copy in changes.copies:
            parent = _parent_inside(self.root, copy.path, create=True)
            assert parent is not None
            target = parent / copy.path.rsplit("/", 1)[-1]
            if target.is_symlink() or target.is_dir():
                _remove(target)
            os.replace(self._staging / "files" / copy.path, target)
        if changes.replace_manifest:
            aside = self._staging / "manifest"
            aside.write_bytes(changes.final)
            os.replace(aside, self._manifest)
        else:
            self._append(changes.final)
        _remove(self._staging)
        return received

    def _append(self, data: bytes) -> None:
        if self._manifest.is_symlink():
            self._manifest.unlink()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        with os.fdopen(os.open(self._manifest, flags, 0o644), "ab") as manifest:
            manifest.write(data)
            manifest.flush()
            os.fsync(manifest.fileno())

    def _download(self, copy: PlannedCopy, *, store: ObjectStore, bucket: str) -> int:
        staged = self._staging / "files" / copy.path
        staged.parent.mkdir(parents=True, exist_ok=True)
        body = store.open_object(bucket, copy.key, copy.etag)
        received = 0
        try:
            with staged.open("wb") as out:
                while chunk := body.read(CHUNK_BYTES):
                    received += len(chunk)
                    if received > copy.size:
                        break
                    out.write(chunk)
        finally:
            body.close()
        if received != copy.size:
            raise S3ObjectChangedError(
                f"s3://{bucket}/{copy.key} was {copy.size} bytes when listed but a different "
                "size was read; the next sync picks up the new version"
            )
        staged.chmod(0o644)
        if copy.last_modified is not None:
            stamp = copy.last_modified.timestamp()
            os.utime(staged, (stamp, stamp))
        return received

"""Applying a change set to a local directory (the CLI, and the sync Job in Job mode).

Same order as in the pod (:mod:`craft_operator.library.destination`): new files are
downloaded into ``<root>/.craft-sync/staging.<random>``, a directory of this sync's own
(those left by earlier ones removed first), the manifest gets its ``pending`` lines,
deletions and renames follow, and the manifest is completed last.

In Job mode the directory is a volume the sandbox mounts too, so the agent can plant a
symlink anywhere under it, or swap a directory for one while the sync runs. The root
itself is trusted (the caller names it; in the Job it is the volume's mount point), and
nothing under it is: every path is walked one component at a time from directory file
descriptors with ``O_NOFOLLOW``, files are created with ``O_EXCL | O_NOFOLLOW``, and
renames, unlinks and ``rmdir`` act on names relative to the directory descriptors. A
directory swapped after it was opened keeps receiving the write (it is still inside the
volume); a symlink found where a directory is needed is replaced by a directory; nothing
is ever written, chmod-ed or deleted through a symlink, and no check is made on a path
that could change before it is used.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import secrets
import stat
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
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
#: Tries to replace an entry the sandbox keeps swapping before the sync gives up (retryable).
ATTEMPTS = 3
#: Entries one tree removal handles at most (unlinked or moved up) before it gives up: the
#: agent could refill a directory as fast as it is emptied.
MAX_REMOVAL_STEPS = 1_000_000
#: Each sync stages into ``staging.<random>`` of its own: a Job's pod stopped at its deadline
#: or deleted runs on until it is killed (the CLI is its pod's PID 1, which SIGTERM does not
#: stop), and the next Job may start meanwhile. With one shared name the earlier one, ending,
#: removed the later one's staging directory under its downloads, failing that sync for good
#: (a missing file is not an error that passes). A sync first removes every staging
#: directory left by earlier ones (``staging`` too, as versions before this one named it).
STAGING = "staging"
MANIFEST = "manifest"
#: The most of a manifest the writer reads. A real one lists each file in a line of about a
#: hundred bytes, so this holds libraries far beyond the file cap; a larger one was planted
#: by the agent and is not trusted (a full resync follows), nor read into memory.
MANIFEST_READ_LIMIT = 16 * 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Errors that mean "something other than a real directory is at this name".
_NOT_A_DIRECTORY = (errno.ENOTDIR, errno.ELOOP)


class PlantedEntryError(DestinationError):
    """An entry under the library kept changing while the sync replaced it; try again."""

    retryable = True


def _planted(relative: str) -> PlantedEntryError:
    return PlantedEntryError(
        f"{relative!r} in the library kept changing while the sync replaced it (an entry "
        "planted by the sandbox?); the next sync tries again"
    )


def _open_dir(parent: int, name: str) -> int:
    """Open the real directory ``name`` in ``parent``; a symlink or file raises OSError."""
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _remove_entry(parent: int, name: str) -> None:
    """Remove whatever is at ``name`` in ``parent`` (a whole tree for a directory).

    ``unlink`` removes a symlink itself, never its target; a directory's tree is removed by
    :func:`_remove_tree`, which walks by descriptors and never follows a symlink.
    """
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.EPERM):
            raise
        _remove_tree(parent, name)


def _remove_tree(parent: int, name: str) -> None:
    """Remove the directory ``name`` in ``parent`` and everything under it.

    The agent can nest directories thousands deep (past Python's recursion limit, which
    ``shutil.rmtree`` reaches on 3.11, and past the open-file limit if each level held a
    descriptor), so this neither recurses nor descends: the entries of each subdirectory of
    the top one are moved up into it, and the emptied subdirectory is removed, until the
    top directory is empty. At most two descriptors are open. A symlink or FIFO is
    unlinked, never opened; a directory swapped for a symlink is not entered (``O_NOFOLLOW``).
    """
    top = _open_dir(parent, name)
    try:
        # Fresh names per removal: one cut off before left ".rm-" entries behind.
        token = secrets.token_hex(8)
        moved = (f".rm-{token}-{n}" for n in itertools.count())
        steps = 0
        while entries := _entries(top):
            steps += len(entries)
            if steps > MAX_REMOVAL_STEPS:
                raise _planted(name)  # refilled as fast as it is emptied
            for entry, is_dir in entries:
                if not is_dir:
                    try:
                        os.unlink(entry, dir_fd=top)
                        continue
                    except FileNotFoundError:
                        continue
                    except IsADirectoryError:
                        pass  # it became a directory since it was listed
                _lift(top, entry, moved)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent)


def _entries(directory: int) -> list[tuple[str, bool]]:
    """The names in ``directory``, and whether each is a real directory (not a symlink)."""
    with os.scandir(directory) as entries:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]


def _lift(top: int, name: str, moved: Iterator[str]) -> None:
    """Move the entries of the directory ``name`` in ``top`` into ``top``, then remove it."""
    try:
        directory = _open_dir(top, name)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in _NOT_A_DIRECTORY:
            return  # swapped for a symlink or file since it was listed: unlinked next round
        raise
    try:
        for entry, _ in _entries(directory):
            _move_up(directory, entry, top, moved)
    finally:
        os.close(directory)
    try:
        os.rmdir(name, dir_fd=top)
    except OSError as exc:
        # Gone, or refilled since it was emptied: the next round sees it again.
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise


def _move_up(directory: int, entry: str, top: int, moved: Iterator[str]) -> None:
    """Rename ``entry`` from ``directory`` into ``top`` under a new name (all of ``top``
    goes, so an entry replaced there by the rename was to be removed anyway)."""
    for _ in range(ATTEMPTS):
        try:
            os.rename(entry, next(moved), src_dir_fd=directory, dst_dir_fd=top)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            # A non-empty directory, or an entry of the other kind, by that name: next name.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
                raise
    raise _planted(entry)


def _ensure_dir(parent: int, name: str, relative: str) -> int:
    """A descriptor of the real directory ``name`` in ``parent``, made if missing.

    A symlink, file or other entry in the way is removed (never followed) and replaced.
    """
    for _ in range(ATTEMPTS):
        try:
            return _open_dir(parent, name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in _NOT_A_DIRECTORY:
                raise
            _remove_entry(parent, name)
        with suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    raise _planted(relative)


def _create_file(parent: int, name: str, relative: str) -> int:
    """A new, empty regular file ``name`` in ``parent`` (whatever was there is removed)."""
    for _ in range(ATTEMPTS):
        try:
            return os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=parent)
        except FileExistsError:
            _remove_entry(parent, name)
    raise _planted(relative)


def _rename_into(source: int, source_name: str, target: int, name: str, relative: str) -> None:
    """Move ``source_name`` over ``name`` (a directory in the way is removed first)."""
    for _ in range(ATTEMPTS):
        try:
            os.replace(source_name, name, src_dir_fd=source, dst_dir_fd=target)
            return
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
            _remove_entry(target, name)
    raise _planted(relative)


class _DirectoryStack:
    """Descriptors of one directory path under the root, reused while paths share it.

    Copies are applied in path order, so consecutive files mostly share their directory:
    only the components that differ are closed and opened again, and at most one path's
    depth of descriptors is open at a time.
    """

    def __init__(self, root: int) -> None:
        self._root = root
        self._names: list[str] = []
        self._fds: list[int] = []

    def enter(self, directories: list[str]) -> int:
        """The descriptor of ``root/directories…``, creating what is missing."""
        common = 0
        while (
            common < len(self._names)
            and common < len(directories)
            and self._names[common] == directories[common]
        ):
            common += 1
        self._truncate(common)
        for name in directories[common:]:
            parent = self._fds[-1] if self._fds else self._root
            relative = "/".join([*self._names, name])
            self._fds.append(_ensure_dir(parent, name, relative))
            self._names.append(name)
        return self._fds[-1] if self._fds else self._root

    def _truncate(self, depth: int) -> None:
        while len(self._fds) > depth:
            os.close(self._fds.pop())
            self._names.pop()

    def close(self) -> None:
        """Close every descriptor held."""
        self._truncate(0)


def _delete(root: int, relative: str) -> None:
    """Delete ``relative`` and then its directories that became empty.

    A missing entry, or a symlink or file where a directory should be, means there is
    nothing of the library's to delete there.
    """
    *directories, name = relative.split("/")
    chain = [root]
    try:
        for directory in directories:
            try:
                chain.append(_open_dir(chain[-1], directory))
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno in _NOT_A_DIRECTORY:
                    return
                raise
        _remove_entry(chain[-1], name)
        for depth in range(len(directories) - 1, -1, -1):
            try:
                os.rmdir(directories[depth], dir_fd=chain[depth])
            except OSError:
                break
    finally:
        for descriptor in chain[1:]:
            os.close(descriptor)


def _remove_stagings(state: int) -> None:
    """Remove the staging directories earlier syncs left in the state directory."""
    for name, _ in _entries(state):
        if name == STAGING or name.startswith(f"{STAGING}."):
            _remove_entry(state, name)


def _write_new(parent: int, name: str, data: bytes, relative: str) -> None:
    descriptor = _create_file(parent, name, relative)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
        out.flush()
        os.fchmod(out.fileno(), 0o644)
        os.fsync(out.fileno())


def _append(state: int, data: bytes) -> None:
    """Append to the manifest; a symlink, FIFO or directory planted there is replaced."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(ATTEMPTS):
        try:
            descriptor = os.open(MANIFEST, flags, 0o644, dir_fd=state)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            _remove_entry(state, MANIFEST)
            continue
        with os.fdopen(descriptor, "ab") as manifest:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                _remove_entry(state, MANIFEST)
                continue
            manifest.write(data)
            manifest.flush()
            os.fsync(descriptor)
            return
    raise _planted(f"{STATE_DIR}/{MANIFEST}")


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


#: Errors of the volume that may pass by themselves (a network volume's hiccup): retried.
_PASSING_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT, errno.ESTALE})
#: The volume is full: not retried as is, but once the volume has grown.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _destination_error(exc: OSError, root: Path) -> DestinationError:
    """What a failed local write means for the sync: a full volume says how to make room,
    an error that may pass is retried, anything else (a file in the way) is final. A name
    that is not UTF-8 (the agent's) is quoted with its bytes escaped (``\\xff``)."""
    where = os.fsencode(exc.filename or root).decode("utf-8", "backslashreplace")
    message = f"cannot update {where}: {exc.strerror or exc}"
    if exc.errno in _FULL_ERRNOS:
        message += (
            " (the library volume is full: raise spec.userLibrary.size; the sync is tried "
            "again once the volume has grown)"
        )
    return DestinationError(message, retryable=exc.errno in _PASSING_ERRNOS)


class LocalDestination:
    """:class:`~craft_operator.library.destination.Destination` in a local directory."""

    def __init__(self, root: Path) -> None:
        """Sync into ``root`` (created if missing; trusted, unlike everything under it)."""
        self.root = root

    async def ensure_root(self) -> None:
        """Create the root if missing (as :meth:`apply` does), for a sync that had nothing
        to apply: an empty library leaves it too, and a root that cannot be (under a file,
        say) fails such a sync with :class:`DestinationError` as it fails any other."""
        try:
            await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise _destination_error(exc, self.root) from None

    async def read_manifest(self) -> bytes | None:
        """The manifest, or ``None`` if there is none, or it is not a plain file, or it is
        larger than :data:`MANIFEST_READ_LIMIT`."""
        try:
            return await asyncio.to_thread(self._read_manifest)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO):
                return None
            raise DestinationError(
                f"cannot read {self.root}/{STATE_DIR}/{MANIFEST}: {exc.strerror}",
                retryable=exc.errno in _PASSING_ERRNOS,
            ) from None

    def _read_manifest(self) -> bytes | None:
        with _opened(self.root) as root:
            state = _open_dir(root, STATE_DIR)
            try:
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                descriptor = os.open(MANIFEST, flags, dir_fd=state)
            finally:
                os.close(state)
        with os.fdopen(descriptor, "rb") as manifest:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return None  # a FIFO or socket planted by the sandbox: no trusted manifest
            data = manifest.read(MANIFEST_READ_LIMIT + 1)
            return None if len(data) > MANIFEST_READ_LIMIT else data

    async def apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        """Download, delete, rename and record ``changes``; return the bytes downloaded."""
        try:
            return await asyncio.to_thread(self._apply, changes, store, bucket)
        except OSError as exc:
            raise _destination_error(exc, self.root) from None

    def _apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        with _opened(self.root) as root:
            state = _ensure_dir(root, STATE_DIR, STATE_DIR)
            try:
                return self._apply_in(root, state, changes, store, bucket)
            finally:
                os.close(state)

    def _apply_in(
        self, root: int, state: int, changes: ChangeSet, store: ObjectStore, bucket: str
    ) -> int:
        _remove_stagings(state)
        area = f"{STAGING}.{secrets.token_hex(8)}"
        staging = _ensure_dir(state, area, f"{STATE_DIR}/{area}")
        try:
            # Staged files get flat names: no directories to walk inside the staging area.
            staged = {copy.path: f"{index:08d}" for index, copy in enumerate(changes.copies)}
            download = partial(self._download, staging=staging, store=store, bucket=bucket)
            with ThreadPoolExecutor(
                DOWNLOAD_THREADS, thread_name_prefix="library-download"
            ) as pool:
                received = sum(
                    pool.map(lambda copy: download(copy, staged[copy.path]), changes.copies)
                )
            _append(state, changes.pending)
            for path in changes.deletes:
                _delete(root, path)
            directories = _DirectoryStack(root)
            try:
                for copy in sorted(changes.copies, key=lambda copy: copy.path.split("/")):
                    *parents, name = copy.path.split("/")
                    target = directories.enter(parents)
                    _rename_into(staging, staged[copy.path], target, name, copy.path)
            finally:
                directories.close()
            if changes.replace_manifest:
                _write_new(staging, MANIFEST, changes.final, f"{STATE_DIR}/{MANIFEST}")
                _rename_into(staging, MANIFEST, state, MANIFEST, f"{STATE_DIR}/{MANIFEST}")
            else:
                _append(state, changes.final)
        finally:
            os.close(staging)
        _remove_entry(state, area)
        return received

    def _download(
        self, copy: PlannedCopy, name: str, *, staging: int, store: ObjectStore, bucket: str
    ) -> int:
        body = store.open_object(bucket, copy.key, copy.etag)
        received = 0
        try:
            descriptor = _create_file(staging, name, copy.path)
            with os.fdopen(descriptor, "wb") as out:
                while chunk := body.read(CHUNK_BYTES):
                    received += len(chunk)
                    if received > copy.size:
                        break
                    out.write(chunk)
                out.flush()
                # By descriptor: the name may already point elsewhere.
                os.fchmod(descriptor, 0o644)
                if copy.last_modified is not None:
                    stamp = copy.last_modified.timestamp()
                    os.utime(descriptor, (stamp, stamp))
        finally:
            body.close()
        if received != copy.size:
            raise S3ObjectChangedError(
                f"s3://{bucket}/{copy.key} was {copy.size} bytes when listed but a different "
                "size was read; the next sync picks up the new version"
            )
        return received

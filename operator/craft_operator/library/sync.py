"""One user-library sync, start to finish: list, read the manifest, plan, apply.

:func:`sync_library` is the whole algorithm against any
:class:`~craft_operator.library.destination.Destination`; :func:`sync_user_library_exec`
(the sandbox pod, over exec) and :func:`sync_user_library_local` (a directory: the CLI and
the sync Job) are the entry points. Errors are :class:`~craft_operator.library.errors.
LibrarySyncError` subclasses with a condition ``reason`` and a ``retryable`` flag.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from craft_operator.kube.exec import ExecTransport
from craft_operator.library.destination import Destination, change_set
from craft_operator.library.errors import LibraryCapExceededError
from craft_operator.library.local import LocalDestination
from craft_operator.library.manifest import parse_manifest
from craft_operator.library.paths import normalise_prefix
from craft_operator.library.plan import CapViolation, SkippedKey, SyncCaps, plan_sync
from craft_operator.library.s3 import ObjectStore
from craft_operator.library.transfer import LIBRARY_ROOT, PodDestination, PodTarget

logger = logging.getLogger(__name__)

#: Skipped keys logged one by one per sync; the rest are counted (all are in the result).
LOGGED_SKIPS = 20


@dataclass(frozen=True)
class SyncResult:
    """What a finished sync did, and what the library holds now.

    ``bytes_transferred`` is what went to the destination: the tar stream (payload and
    framing) in exec mode, the downloaded bytes in a local directory.
    """

    files: int
    bytes: int
    bytes_transferred: int
    copied: int
    deleted: int
    skipped: tuple[SkippedKey, ...]
    excluded: int
    duration_seconds: float

    def summary(self) -> str:
        """One line for people: what changed and what was sent."""
        return (
            f"copied {self.copied}, deleted {self.deleted}, skipped {len(self.skipped)} "
            f"files; transferred {self.bytes_transferred} bytes; library now "
            f"{self.files} files, {self.bytes} bytes ({self.duration_seconds:.2f}s)"
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``craft-operator sync-user-library --json``."""
        return {
            "copied": self.copied,
            "deleted": self.deleted,
            "skipped": len(self.skipped),
            "excluded": self.excluded,
            "bytesTransferred": self.bytes_transferred,
            "files": self.files,
            "bytes": self.bytes,
            "durationSeconds": round(self.duration_seconds, 3),
            "skippedKeys": [item.to_json() for item in self.skipped],
        }


def _raise_cap(violation: CapViolation) -> None:
    raise LibraryCapExceededError(
        violation.message,
        reason=violation.reason,
        limit=violation.limit,
        actual=violation.actual,
        key=violation.key,
    )


async def sync_library(
    *,
    store: ObjectStore,
    bucket: str,
    prefix: str,
    destination: Destination,
    excludes: Sequence[str] = (),
    disabled: Iterable[str] = (),
    caps: SyncCaps | None = None,
) -> SyncResult:
    """Make ``destination`` match the objects under ``prefix`` in ``bucket``.

    Raises :class:`~craft_operator.library.errors.LibraryCapExceededError` (nothing
    applied) when the library is over a cap, and other
    :class:`~craft_operator.library.errors.LibrarySyncError` subclasses on S3 or
    destination failures.
    """
    started = time.monotonic()
    prefix = normalise_prefix(prefix)
    listing = await asyncio.to_thread(store.list_objects, bucket, prefix)
    manifest = parse_manifest(await destination.read_manifest())
    plan = plan_sync(
        listing, manifest.entries, prefix=prefix, excludes=excludes, disabled=disabled, caps=caps
    )
    if isinstance(plan, CapViolation):
        _raise_cap(plan)
        raise AssertionError("unreachable")
    for item in plan.skipped[:LOGGED_SKIPS]:
        logger.warning("skipping library key %r: %s", item.key, item.reason.value)
    if len(plan.skipped) > LOGGED_SKIPS:
        logger.warning("skipping %d more library keys", len(plan.skipped) - LOGGED_SKIPS)
    transferred = 0
    if not plan.is_empty:
        transferred = await destination.apply(change_set(plan, manifest), store, bucket)
    return SyncResult(
        files=plan.files,
        bytes=plan.bytes,
        bytes_transferred=transferred,
        copied=len(plan.copies),
        deleted=len(plan.deletes),
        skipped=plan.skipped,
        excluded=len(plan.excluded),
        duration_seconds=time.monotonic() - started,
    )


async def sync_user_library_exec(
    *,
    store: ObjectStore,
    bucket: str,
    prefix: str,
    exec_transport: ExecTransport,
    namespace: str,
    pod: str,
    container: str,
    excludes: Sequence[str] = (),
    disabled: Iterable[str] = (),
    caps: SyncCaps | None = None,
    root: str = LIBRARY_ROOT,
    timeout_seconds: float = 120.0,
) -> SyncResult:
    """Sync the library into ``root`` of a running sandbox container over exec."""
    destination = PodDestination(
        exec_transport,
        PodTarget(namespace=namespace, pod=pod, container=container, root=root),
        timeout_seconds=timeout_seconds,
    )
    return await sync_library(
        store=store,
        bucket=bucket,
        prefix=prefix,
        destination=destination,
        excludes=excludes,
        disabled=disabled,
        caps=caps,
    )


async def sync_user_library_local(
    *,
    store: ObjectStore,
    bucket: str,
    prefix: str,
    dest: Path,
    excludes: Sequence[str] = (),
    disabled: Iterable[str] = (),
    caps: SyncCaps | None = None,
) -> SyncResult:
    """Sync the library into the local directory ``dest``."""
    return await sync_library(
        store=store,
        bucket=bucket,
        prefix=prefix,
        destination=LocalDestination(dest),
        excludes=excludes,
        disabled=disabled,
        caps=caps,
    )

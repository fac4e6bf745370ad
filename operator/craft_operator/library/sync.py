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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from craft_operator.daemon_threads import in_daemon_thread
from craft_operator.kube.exec import ExecTransport
from craft_operator.library.destination import ChangeSet, Destination, change_set
from craft_operator.library.errors import (
    LibraryCapExceededError,
    LibraryConfigError,
    S3ObjectArchivedError,
)
from craft_operator.library.local import LocalDestination
from craft_operator.library.manifest import UNKNOWN, Manifest, parse_manifest
from craft_operator.library.paths import (
    CostlyGlobsError,
    InvalidGlobError,
    check_globs,
    normalise_prefix,
)
from craft_operator.library.plan import (
    CapViolation,
    S3Object,
    SkippedKey,
    SyncCaps,
    SyncPlan,
    plan_sync,
)
from craft_operator.library.record import (
    Distrust,
    PodManifest,
    SyncRecord,
    base_manifest,
    digest,
    lines_of,
)
from craft_operator.library.s3 import LoopLister, ObjectStore
from craft_operator.library.transfer import (
    LIBRARY_ROOT,
    MANIFEST_MAX_BYTES,
    PodDestination,
    PodTarget,
)

logger = logging.getLogger(__name__)

#: Skipped keys logged one by one per sync; the rest are counted (all are in the result).
LOGGED_SKIPS = 20
#: Objects S3 may refuse as archived in one sync, each found by an attempt that is then
#: started again without it (and whose upload so far is sent again); one more fails it.
MAX_REFUSED_ARCHIVED = 8


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
    #: Why the pod's copy of the manifest was not used, if it was not (Exec mode).
    distrust: Distrust | None = None

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


class RecordKeeper(Protocol):
    """The operator's record of one sandbox's synced library (see
    :mod:`craft_operator.library.record`), somewhere the pod cannot write."""

    async def load(self) -> SyncRecord | None:
        """The record, if there is one."""
        ...

    async def save(self, record: SyncRecord) -> None:
        """Replace the record."""
        ...


@dataclass(frozen=True)
class _Sync:
    """What one sync copies from and how: the listing, the plan and the result of each of
    its attempts (:func:`_skipping_archived`) come from here."""

    store: ObjectStore
    bucket: str
    prefix: str
    excludes: Sequence[str]
    disabled: Sequence[str]
    caps: SyncCaps
    started: float

    @classmethod
    def of(
        cls,
        store: ObjectStore,
        bucket: str,
        prefix: str,
        excludes: Sequence[str],
        disabled: Iterable[str],
        caps: SyncCaps | None,
    ) -> _Sync:
        """The sync of ``bucket``'s objects under ``prefix``, started now."""
        return cls(
            store=store,
            bucket=bucket,
            prefix=normalise_prefix(prefix),
            excludes=excludes,
            disabled=list(disabled),
            caps=caps or SyncCaps(),
            started=time.monotonic(),
        )

    async def objects(self, refused: frozenset[str] = frozenset()) -> list[S3Object]:
        """The objects under the prefix, those whose keys are in ``refused`` marked
        archived; a listing past the caps' most keys is refused (nothing applied) before
        it is held whole: a prefix of a million empty objects would take the operator's
        memory, whatever their bytes."""
        most = self.caps.max_listed_keys
        listing = None
        if isinstance(self.store, LoopLister):
            listing = await self.store.list_objects_on_loop(self.bucket, self.prefix, limit=most)
        if listing is None:
            listing = await in_daemon_thread(
                partial(self.store.list_objects, self.bucket, self.prefix, limit=most)
            )
        if len(listing) > most:
            raise LibraryCapExceededError(
                f"more than {most} keys under s3://{self.bucket}/{self.prefix} (ten times "
                "CRAFT_LIBRARY_MAX_FILES); nothing was synced",
                reason="LibraryTooLarge",
                limit=most,
                actual=len(listing),
            )
        if refused:
            listing = [
                replace(obj, refused_as_archived=True) if obj.key in refused else obj
                for obj in listing
            ]
        return listing

    async def plan(self, listing: list[S3Object], manifest: Manifest) -> SyncPlan:
        """Plan in a worker thread (a library of many keys must not stall the event loop)."""
        try:
            check_globs(self.excludes)
        except InvalidGlobError as exc:
            raise LibraryConfigError(f"{exc} (spec.userLibrary.exclude)") from None
        try:
            plan = await in_daemon_thread(
                plan_sync,
                listing,
                manifest.entries,
                prefix=self.prefix,
                excludes=self.excludes,
                disabled=self.disabled,
                caps=self.caps,
            )
        except CostlyGlobsError as exc:
            raise LibraryConfigError(f"{exc} (spec.userLibrary.exclude)") from None
        if isinstance(plan, CapViolation):
            _raise_cap(plan)
            raise AssertionError("unreachable")
        for item in plan.skipped[:LOGGED_SKIPS]:
            logger.warning("skipping library key %r: %s", item.key, item.reason.value)
        if len(plan.skipped) > LOGGED_SKIPS:
            logger.warning("skipping %d more library keys", len(plan.skipped) - LOGGED_SKIPS)
        return plan

    def result(
        self, plan: SyncPlan, transferred: int, distrust: Distrust | None = None
    ) -> SyncResult:
        """What the sync did, as :class:`SyncResult`."""
        return SyncResult(
            files=plan.files,
            bytes=plan.bytes,
            bytes_transferred=transferred,
            copied=len(plan.copies),
            deleted=len(plan.deletes),
            skipped=plan.skipped,
            excluded=len(plan.excluded),
            duration_seconds=time.monotonic() - self.started,
            distrust=distrust,
        )


async def _skipping_archived(
    bucket: str, attempt: Callable[[frozenset[str]], Awaitable[SyncResult]]
) -> SyncResult:
    """Run ``attempt``; each time S3 refuses an object as archived (an Intelligent-Tiering
    archive tier, which no listing shows), run it again with that key skipped, up to
    :data:`MAX_REFUSED_ARCHIVED` keys. Nothing is applied by an attempt that stops so."""
    refused: set[str] = set()
    while True:
        try:
            return await attempt(frozenset(refused))
        except S3ObjectArchivedError as exc:
            if exc.key is None or exc.key in refused:
                raise
            if len(refused) >= MAX_REFUSED_ARCHIVED:
                raise S3ObjectArchivedError(
                    f"{exc.message}; more than {MAX_REFUSED_ARCHIVED} objects of the library "
                    "are archived: restore them, or leave them out with "
                    "spec.userLibrary.exclude",
                    key=exc.key,
                ) from exc
            logger.warning(
                "s3://%s/%s is archived; syncing the library without it", bucket, exc.key
            )
            refused.add(exc.key)


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
    destination failures. An object S3 refuses as archived is skipped (see
    :func:`_skipping_archived`).
    """
    sync = _Sync.of(store, bucket, prefix, excludes, disabled, caps)
    return await _skipping_archived(bucket, partial(_sync_library, sync, destination))


async def _sync_library(
    sync: _Sync, destination: Destination, refused: frozenset[str]
) -> SyncResult:
    listing = await sync.objects(refused)
    manifest = await in_daemon_thread(parse_manifest, await destination.read_manifest())
    plan = await sync.plan(listing, manifest)
    transferred = 0
    if not plan.is_empty:
        changes = change_set(plan, manifest, cap=sync.caps.max_manifest_bytes)
        transferred = await destination.apply(changes, sync.store, sync.bucket)
    return sync.result(plan, transferred)


async def sync_recorded(
    *,
    store: ObjectStore,
    bucket: str,
    prefix: str,
    destination: PodDestination,
    records: RecordKeeper,
    pod_uid: str,
    excludes: Sequence[str] = (),
    disabled: Iterable[str] = (),
    caps: SyncCaps | None = None,
) -> SyncResult:
    """:func:`sync_library` into a pod, planned from the operator's record, not the pod.

    The pod's manifest is read (capped) only to check that the pod still holds what the
    record says; if not, the library is copied again in full and the result says why
    (:attr:`SyncResult.distrust`). A pod the record is not of (a new pod) gets the whole
    library and a new manifest without its own being read. The record is updated before
    anything in the pod changes (every path touched becomes unknown) and again once the
    sync is done.
    """
    sync = _Sync.of(store, bucket, prefix, excludes, disabled, caps)
    # Every attempt plans from the record as it was before the first: one that stopped at an
    # archived object applied nothing, and its pending record names the object unknown.
    loaded: list[SyncRecord | None] = []

    async def load_once() -> SyncRecord | None:
        if not loaded:
            loaded.append(await records.load())
        return loaded[0]

    return await _skipping_archived(
        bucket, partial(_sync_recorded, sync, destination, records, pod_uid, load_once)
    )


async def _sync_recorded(
    sync: _Sync,
    destination: PodDestination,
    records: RecordKeeper,
    pod_uid: str,
    load_record: Callable[[], Awaitable[SyncRecord | None]],
    refused: frozenset[str],
) -> SyncResult:
    listing, record = await asyncio.gather(sync.objects(refused), load_record())
    if record is not None and record.pod_uid == pod_uid:
        pod = await destination.read_pod_manifest()
    else:
        pod = PodManifest(data=None, unread=True)
    manifest, distrust = await in_daemon_thread(
        base_manifest, pod, record, pod_uid, cap=destination.manifest_max_bytes
    )
    if manifest.valid and not pod.data:
        # No manifest in the pod to append to (a first sync cut off before its upload
        # landed): write a whole one, with its header.
        manifest = replace(manifest, valid=False)
    plan = await sync.plan(listing, manifest)
    stale_copy = not manifest.valid and (pod.data is not None or pod.too_large or pod.unread)
    if plan.is_empty and not stale_copy:
        # After a stopped attempt (refused), the stored record is that attempt's pending one.
        if record is None or record.pod_uid != pod_uid or record.pending or refused:
            await records.save(
                SyncRecord(pod_uid, plan.library, lines_of(pod.data), (digest(pod.data),))
            )
        return sync.result(plan, 0, distrust)
    changes = change_set(plan, manifest, cap=sync.caps.max_manifest_bytes)
    await records.save(_pending_record(pod, pod_uid, manifest, plan, changes))
    transferred = await destination.apply(changes, sync.store, sync.bucket)
    final = _manifest_after(pod, changes)
    await records.save(SyncRecord(pod_uid, plan.library, lines_of(final), (digest(final),)))
    return sync.result(plan, transferred, distrust)


def _manifest_after(pod: PodManifest, changes: ChangeSet) -> bytes:
    """The manifest the pod holds once ``changes`` are applied."""
    if changes.replace_manifest:
        return changes.final
    return (pod.data or b"") + changes.pending + changes.final


def _pending_record(
    pod: PodManifest, pod_uid: str, manifest: Manifest, plan: SyncPlan, changes: ChangeSet
) -> SyncRecord:
    """The record while ``changes`` are applied: any of the states an interruption can
    leave is accepted, and every path it touches is unknown (copied again next time)."""
    touched = [copy.path for copy in plan.copies] + list(plan.deletes)
    entries = {**manifest.entries, **dict.fromkeys(touched, UNKNOWN)}
    final = _manifest_after(pod, changes)
    digests = [digest(final)]
    if not pod.too_large and (manifest.valid or pod.data is None):
        # What the pod holds before the upload lands, and after it appended `pending`.
        # A copy the operator distrusts is never accepted again. A new pod's manifest is
        # not read: it has none (a stale one, after an interruption, reads as tampered).
        before = pod.data or b""
        digests += [digest(before), digest(before + changes.pending)]
    lines = lines_of(final) + lines_of(changes.pending)
    return SyncRecord(pod_uid, entries, lines, tuple(digests))


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
    manifest_max_bytes: int = MANIFEST_MAX_BYTES,
    records: RecordKeeper | None = None,
    pod_uid: str = "",
) -> SyncResult:
    """Sync the library into ``root`` of a running sandbox container over exec.

    Each command may take ``timeout_seconds``. With ``records`` (the operator does) the
    sync is planned from the operator's record (:func:`sync_recorded`); without, from the
    pod's own manifest, read up to ``manifest_max_bytes`` (a larger one counts as none).
    """
    destination = PodDestination(
        exec_transport,
        PodTarget(namespace=namespace, pod=pod, container=container, root=root),
        timeout_seconds=timeout_seconds,
        manifest_max_bytes=manifest_max_bytes,
    )
    if records is not None:
        return await sync_recorded(
            store=store,
            bucket=bucket,
            prefix=prefix,
            destination=destination,
            records=records,
            pod_uid=pod_uid,
            excludes=excludes,
            disabled=disabled,
            caps=caps,
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
    """Sync the library into the local directory ``dest``, created if missing, even for an
    empty library (not when the sync fails, over a cap say: nothing is written then)."""
    destination = LocalDestination(dest)
    result = await sync_library(
        store=store,
        bucket=bucket,
        prefix=prefix,
        destination=destination,
        excludes=excludes,
        disabled=disabled,
        caps=caps,
    )
    await destination.ensure_root()
    return result

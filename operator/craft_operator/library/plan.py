"""The sync planner: what to copy and delete, from an S3 listing and a manifest. Pure.

:func:`plan_sync` never touches S3 or the destination. It validates every key
(:mod:`craft_operator.library.paths`), drops excluded and disabled paths, resolves
collisions, checks the size caps, and compares what remains with the manifest: new and
changed files are copied, files that are gone from S3 (or now excluded or disabled) are
deleted, everything else is left alone. Over a cap it returns a :class:`CapViolation`
instead of a plan, so that nothing is applied.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from craft_operator.library.manifest import ManifestEntry, is_safe_etag, render_manifest
from craft_operator.library.paths import (
    CostlyGlobsError,
    ExcludeMatcher,
    SkipReason,
    UnsafePathError,
    ancestors,
    is_disabled,
    normalise_disabled,
    normalise_path,
    normalise_prefix,
)

MB = 1000 * 1000
GB = 1000 * MB
DEFAULT_MAX_FILE_BYTES = 500 * MB
DEFAULT_MAX_TOTAL_BYTES = 10 * GB
DEFAULT_MAX_FILES = 10_000


#: Storage classes whose objects cannot be read until restored (a GET is refused with
#: ``InvalidObjectState``); Glacier Instant Retrieval reads as any other.
ARCHIVED_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


@dataclass(frozen=True)
class S3Object:
    """One object of the S3 listing."""

    key: str
    size: int
    etag: str
    last_modified: datetime | None = None
    #: As listed (``STANDARD`` when the listing names none).
    storage_class: str = "STANDARD"
    #: S3 refused to serve it (``InvalidObjectState``) although its class is readable: an
    #: Intelligent-Tiering archive tier, which no listing shows.
    refused_as_archived: bool = False

    @property
    def archived(self) -> bool:
        """Whether S3 serves it only once it is restored."""
        return self.refused_as_archived or self.storage_class in ARCHIVED_CLASSES


@dataclass(frozen=True)
class SyncCaps:
    """Size limits of one user library."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    #: Files: planning, the manifest and the record grow with them, not with their bytes.
    max_files: int = DEFAULT_MAX_FILES
    #: The most of the destination's manifest that is read: a library whose manifest could
    #: outgrow it would be copied again in full at every sync (``None``: no such limit).
    max_manifest_bytes: int | None = None
    #: Seconds of CPU matching the exclude globs against the listing may take: the usual
    #: globs take a fraction of a second at the most files; globs built to defeat RE2's
    #: fast automaton (``*a???...c``, a hundred of them) took minutes of the operator's CPU.
    max_exclude_seconds: float = 10.0

    @property
    def max_listed_keys(self) -> int:
        """Keys listed before the listing stops (excluded and skipped keys are listed but
        are no files: a small project beside a large excluded tree is fine, so ten times the
        files)."""
        return 10 * self.max_files


@dataclass(frozen=True)
class SkippedKey:
    """A key that was not synced, with the reason (and, for collisions, the winner)."""

    key: str
    reason: SkipReason
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        """The JSON form used by the CLI and in status messages."""
        reason = self.reason.value + (f" ({self.detail})" if self.detail else "")
        return {"key": self.key, "reason": reason}


@dataclass(frozen=True)
class PlannedCopy:
    """A file to copy: its destination path and the S3 object it comes from."""

    path: str
    key: str
    size: int
    etag: str
    last_modified: datetime | None = None

    @property
    def entry(self) -> ManifestEntry:
        """The manifest entry the destination will hold once the copy is in place."""
        return ManifestEntry(size=self.size, etag=self.etag)


@dataclass(frozen=True)
class SyncPlan:
    """What one sync will do. ``library`` is the destination's content afterwards."""

    copies: tuple[PlannedCopy, ...]
    deletes: tuple[str, ...]
    skipped: tuple[SkippedKey, ...]
    excluded: tuple[str, ...]
    library: Mapping[str, ManifestEntry] = field(default_factory=dict)

    @property
    def files(self) -> int:
        """Files in the library once the plan is applied."""
        return len(self.library)

    @property
    def bytes(self) -> int:
        """Bytes in the library once the plan is applied."""
        return sum(entry.size or 0 for entry in self.library.values())

    @property
    def bytes_to_copy(self) -> int:
        """Payload bytes the plan copies (without any framing)."""
        return sum(copy.size for copy in self.copies)

    @property
    def is_empty(self) -> bool:
        """True if the destination already matches S3."""
        return not self.copies and not self.deletes


@dataclass(frozen=True)
class CapViolation:
    """The library is over a cap: the reason for ``UserLibrarySynced`` and the figures."""

    reason: str
    message: str
    limit: int
    actual: int
    key: str | None = None


def _validated(
    listing: Iterable[S3Object], prefix: str
) -> tuple[dict[str, list[S3Object]], list[SkippedKey]]:
    """Normal path to the objects that map onto it, and the keys rejected outright."""
    groups: dict[str, list[S3Object]] = defaultdict(list)
    skipped: list[SkippedKey] = []
    for obj in listing:
        if obj.key.endswith("/"):
            continue  # a folder marker, not a file
        if not obj.key.startswith(prefix):
            skipped.append(SkippedKey(obj.key, SkipReason.OUTSIDE_DESTINATION))
            continue
        try:
            path = normalise_path(obj.key[len(prefix) :])
        except UnsafePathError as exc:
            skipped.append(SkippedKey(obj.key, exc.reason))
            continue
        if not is_safe_etag(obj.etag):
            skipped.append(SkippedKey(obj.key, SkipReason.INVALID_ETAG))
            continue
        groups[path].append(obj)
    return groups, skipped


def _resolve_collisions(
    groups: Mapping[str, list[S3Object]], prefix: str
) -> tuple[dict[str, S3Object], list[SkippedKey]]:
    """One object per path: the key already in normal form wins, else nobody does."""
    chosen: dict[str, S3Object] = {}
    skipped: list[SkippedKey] = []
    for path, objects in groups.items():
        if len(objects) == 1:
            chosen[path] = objects[0]
            continue
        canonical = [obj for obj in objects if obj.key == prefix + path]
        winner = canonical[0] if canonical else None
        if winner is not None:
            chosen[path] = winner
        for obj in objects:
            if obj is not winner:
                detail = f"kept {winner.key!r}" if winner else f"all keys for {path!r} skipped"
                skipped.append(SkippedKey(obj.key, SkipReason.COLLISION, detail))
    files_needing_dirs = {
        parent for path in chosen for parent in ancestors(path) if parent in chosen
    }
    for path in sorted(files_needing_dirs):
        obj = chosen.pop(path)
        skipped.append(SkippedKey(obj.key, SkipReason.FILE_DIRECTORY_CONFLICT))
    return chosen, skipped


def _check_caps(
    library: Mapping[str, S3Object], entries: Mapping[str, ManifestEntry], caps: SyncCaps
) -> CapViolation | None:
    for path in sorted(library):
        obj = library[path]
        if obj.size > caps.max_file_bytes:
            return CapViolation(
                reason="FileTooLarge",
                message=(
                    f"{obj.key!r} is {obj.size} bytes, over the per-file cap of "
                    f"{caps.max_file_bytes} bytes; nothing was synced"
                ),
                limit=caps.max_file_bytes,
                actual=obj.size,
                key=obj.key,
            )
    if len(library) > caps.max_files:
        return CapViolation(
            reason="LibraryTooLarge",
            message=(
                f"the library holds {len(library)} files, over the cap of {caps.max_files} "
                "files (CRAFT_LIBRARY_MAX_FILES); nothing was synced"
            ),
            limit=caps.max_files,
            actual=len(library),
        )
    total = sum(obj.size for obj in library.values())
    if total > caps.max_total_bytes:
        return CapViolation(
            reason="LibraryTooLarge",
            message=(
                f"the library holds {total} bytes in {len(library)} files, over the cap of "
                f"{caps.max_total_bytes} bytes; nothing was synced"
            ),
            limit=caps.max_total_bytes,
            actual=total,
        )
    if caps.max_manifest_bytes is not None:
        size = len(render_manifest(entries))
        if size > caps.max_manifest_bytes:
            return CapViolation(
                reason="LibraryTooLarge",
                message=(
                    f"the manifest of the library's {len(library)} files is {size} bytes, "
                    f"over the {caps.max_manifest_bytes} read of it "
                    "(CRAFT_LIBRARY_MANIFEST_MAX_BYTES): every sync would copy the library "
                    "in full; nothing was synced"
                ),
                limit=caps.max_manifest_bytes,
                actual=size,
            )
    return None


def _excluded(
    paths: Iterable[str], disabled: frozenset[str], matcher: ExcludeMatcher, seconds: float
) -> list[str]:
    """The paths disabled or excluded, sorted; :class:`CostlyGlobsError` once matching has
    taken more than ``seconds`` of this thread's CPU (each path's match is bounded)."""
    end = time.thread_time() + seconds
    excluded = []
    for count, path in enumerate(paths, 1):
        if is_disabled(path, disabled) or matcher.excludes(path):
            excluded.append(path)
        if time.thread_time() > end:
            raise CostlyGlobsError(
                f"matching the exclude globs took more than {seconds:g} s of CPU after "
                f"{count} of the library's names: use fewer wildcards (above all `?` "
                "after a `*`) or fewer globs"
            )
    return sorted(excluded)


def _archived(
    library: dict[str, S3Object], manifest: Mapping[str, ManifestEntry]
) -> tuple[dict[str, ManifestEntry], list[SkippedKey]]:
    """Take the archived objects out of ``library``: what the destination holds of them is
    kept as it is (a file synced before its object was archived is not deleted), and those
    it lacks, or holds in another version, are skipped and said."""
    kept: dict[str, ManifestEntry] = {}
    skipped: list[SkippedKey] = []
    for path in [path for path, obj in library.items() if obj.archived]:
        obj = library.pop(path)
        held = manifest.get(path)
        if held is not None:
            kept[path] = held
        if held != ManifestEntry(size=obj.size, etag=obj.etag):
            tier = " (archive tier)" if obj.refused_as_archived else ""
            skipped.append(SkippedKey(obj.key, SkipReason.ARCHIVED, obj.storage_class + tier))
    return kept, skipped


def plan_sync(
    listing: Iterable[S3Object],
    manifest: Mapping[str, ManifestEntry],
    *,
    prefix: str,
    excludes: Sequence[str] = (),
    disabled: Iterable[str] = (),
    caps: SyncCaps | None = None,
) -> SyncPlan | CapViolation:
    """Plan a sync of ``listing`` (the objects under ``prefix``) onto a destination.

    ``manifest`` is what the destination holds (see :mod:`craft_operator.library.manifest`);
    entries with unknown size or ETag are copied again. Returns a :class:`CapViolation`
    instead of a plan when the library is over a cap in ``caps``.
    """
    prefix = normalise_prefix(prefix)
    caps = caps or SyncCaps()
    disabled_paths = normalise_disabled(disabled)
    matcher = ExcludeMatcher(excludes)
    groups, skipped = _validated(listing, prefix)
    excluded = _excluded(groups, disabled_paths, matcher, caps.max_exclude_seconds)
    for path in excluded:
        del groups[path]
    library, more_skipped = _resolve_collisions(groups, prefix)
    skipped.extend(more_skipped)
    kept, archived = _archived(library, manifest)
    skipped.extend(archived)
    entries = {path: ManifestEntry(obj.size, obj.etag) for path, obj in library.items()}
    entries.update(kept)
    violation = _check_caps(library, entries, caps)
    if violation is not None:
        return violation
    copies = tuple(
        PlannedCopy(path, obj.key, obj.size, obj.etag, obj.last_modified)
        for path, obj in sorted(library.items())
        if manifest.get(path) != ManifestEntry(size=obj.size, etag=obj.etag)
    )
    deletes = tuple(sorted(path for path in manifest if path not in entries))
    return SyncPlan(
        copies=copies,
        deletes=deletes,
        skipped=tuple(sorted(skipped, key=lambda item: item.key)),
        excluded=tuple(excluded),
        library=entries,
    )

"""The operator's own record of a synced library, and what it makes of the pod's manifest.

The agent in the sandbox can rewrite ``/workspace/user_library/.craft-sync/manifest`` at
will: make it huge, make it claim files that are not there, or drop lines. So in Exec mode
the operator plans from its own record (:class:`SyncRecord`, kept in the credentials
database, which the pod cannot reach) and reads the pod's manifest only as a hint, to see
whether the pod still holds what the operator left there:

* the pod's manifest is read up to a cap; over the cap it is *too large*;
* its SHA-256 is one of the record's ``digests`` (what the pod holds after the last sync,
  or at any point of an interrupted one): the record is the base of the plan, and nothing
  the pod wrote is parsed. One exception: a sync whose record was saved before it ran but
  not after (its answer lost, the save failed, the operator stopped) and whose pod shows
  the manifest that sync ends with. Those bytes are the operator's own (their SHA-256 is
  the one it computed), so they are parsed as the base: what landed is not sent again;
* otherwise, if the record is of this pod, the pod's copy was *tampered with*: every file
  is copied again, files the record knows and S3 no longer has are deleted, and the
  manifest is replaced;
* no record of this pod (a new pod, whose library volume starts empty): a full sync, the
  pod's manifest, if any, replaced.

Pure functions; the database side is :mod:`craft_operator.credentials.library_records`.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from craft_operator.library.manifest import UNKNOWN, Manifest, ManifestEntry, parse_manifest

#: Why the pod's manifest was not used (condition messages and event reasons).
TOO_LARGE = "ManifestTooLarge"
TAMPERED = "ManifestTampered"


@dataclass(frozen=True)
class SyncRecord:
    """What the operator synced into one pod: the library, and the manifests it may show."""

    pod_uid: str
    entries: Mapping[str, ManifestEntry]
    lines: int
    #: The first is what the pod holds once the last sync has landed whole.
    digests: tuple[str, ...]

    @property
    def pending(self) -> bool:
        """Whether an entry is unknown: the record was saved before a sync not recorded as
        done (the paths it touches), or a copy is kept unknown (an archived object's)."""
        return not all(entry.known for entry in self.entries.values())


@dataclass(frozen=True)
class PodManifest:
    """The pod's manifest as read: its first bytes (up to the cap), or that it was larger.

    ``unread``: not read at all (a pod the operator has no record of), so whatever it
    holds is replaced.
    """

    data: bytes | None
    too_large: bool = False
    unread: bool = False


@dataclass(frozen=True)
class Distrust:
    """Why the pod's copy of the manifest was not used: a reason and a message for people."""

    reason: str
    message: str


def digest(data: bytes | None) -> str:
    """The SHA-256 of a manifest as the pod holds it (no manifest: of nothing)."""
    return hashlib.sha256(data or b"").hexdigest()


def encode_entries(entries: Mapping[str, ManifestEntry]) -> bytes:
    """``entries`` as stored in the record: zlib-compressed JSON, ``[size, etag]`` per path."""
    plain = {path: [entry.size, entry.etag] for path, entry in entries.items()}
    return zlib.compress(json.dumps(plain, separators=(",", ":")).encode(), 6)


def decode_entries(blob: bytes) -> dict[str, ManifestEntry]:
    """The entries of a stored record (written by :func:`encode_entries`, never by a pod)."""
    plain = json.loads(zlib.decompress(blob))
    return {path: ManifestEntry(size=value[0], etag=value[1]) for path, value in plain.items()}


def base_manifest(
    pod: PodManifest, record: SyncRecord | None, pod_uid: str, *, cap: int
) -> tuple[Manifest, Distrust | None]:
    """The manifest to plan from, and why the pod's copy was distrusted (if it was).

    The result is the record's entries, or the record's paths all unknown (copied again,
    or deleted if S3 no longer has them), or empty; or, once a recorded-as-pending sync has
    landed whole, the manifest it wrote, which is the operator's own by its digest.
    """
    known = record if record is not None and record.pod_uid == pod_uid else None
    shown = None if pod.too_large else digest(pod.data)
    if known is not None and shown in known.digests:
        if known.pending and shown == known.digests[0]:
            landed = parse_manifest(pod.data)
            if landed.valid:
                return landed, None
        return Manifest(entries=known.entries, lines=known.lines, valid=True), None
    redo = Manifest(
        entries=dict.fromkeys(known.entries, UNKNOWN) if known is not None else {},
        lines=0,
        valid=False,
    )
    if pod.too_large:
        message = (
            f"the library manifest in the pod is over {cap} bytes "
            "(CRAFT_LIBRARY_MANIFEST_MAX_BYTES); it was not read and every file was copied again"
        )
        return redo, Distrust(TOO_LARGE, message)
    if known is not None:
        message = (
            "the library manifest in the pod is not the one the operator wrote; "
            "every file was copied again"
        )
        return redo, Distrust(TAMPERED, message)
    return redo, None


def lines_of(data: bytes | None) -> int:
    """Complete lines of a manifest (what compaction counts)."""
    return (data or b"").count(b"\n")

"""What one library sync is for, and whether the last one already delivered it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from craft_operator.api.models import (
    ANNOTATION_LIBRARY_REVISION,
    MAX_LIBRARY_REVISION,
    ConditionStatus,
    CraftSandbox,
    UserLibraryStatus,
)
from craft_operator.kube.exec import WITHHELD, holds_piece_of
from craft_operator.library import LibraryLocation
from craft_operator.reconciler.run import Run
from craft_operator.reconciler.step import WAITING_MESSAGE, Pass
from craft_operator.status import USER_LIBRARY_SYNCED, ConditionState

#: Reasons of a True condition: synced incrementally, or in full because the pod's copy of
#: the manifest was not trusted.
SYNCED, RESYNCED = "Synced", "ResyncedInFull"
#: UserLibrarySynced's reason for a revision longer than :data:`MAX_LIBRARY_REVISION`.
REVISION_TOO_LONG = "RevisionTooLong"


@dataclass(frozen=True)
class Attempt:
    """What one sync is for: the revision, the pod and the configuration, and their hash."""

    revision: str
    pod_uid: str
    config: str
    key: str

    @classmethod
    def of(cls, revision: str, pod_uid: str, config: str) -> Attempt:
        """The attempt for these three, keyed by their hash."""
        return cls(revision, pod_uid, config, short_hash(f"{revision}|{pod_uid}|{config}"))


def attempt_for(sandbox: CraftSandbox, location: LibraryLocation, pod_uid: str) -> Attempt:
    """What a sync now would be for: the annotated revision, this pod, this configuration."""
    revision = sandbox.metadata.annotations.get(ANNOTATION_LIBRARY_REVISION, "")
    library = sandbox.spec.user_library
    config = short_hash(
        json.dumps(
            [location.bucket, location.prefix, library.exclude, library.disabled_paths],
            separators=(",", ":"),
        )
    )
    return Attempt.of(revision, pod_uid, config)


def is_current(run: Run, current: UserLibraryStatus, attempt: Attempt) -> bool:
    """Whether the last successful sync delivered this revision, into this pod, with this
    configuration."""
    synced = run.condition(USER_LIBRARY_SYNCED)
    return (
        synced is not None
        and synced.status == ConditionStatus.TRUE
        and synced.reason in (SYNCED, RESYNCED)
        and _recorded_for(current, attempt)
    )


def still_current(run: Run, current: UserLibraryStatus, attempt: Attempt) -> bool:
    """:func:`is_current`, and also when the condition is Unknown only because a pass
    stopped before this row since (the database down, a Secret refused): the status still
    records a successful sync of this revision, into this pod, with this configuration,
    so its True condition is restored and nothing is synced again (after an outage, every
    sandbox of the fleet would otherwise resync its whole library before it is Ready)."""
    if is_current(run, current, attempt):
        return True
    held = run.condition(USER_LIBRARY_SYNCED)
    waited = (
        held is not None
        and held.status == ConditionStatus.UNKNOWN
        and held.message == WAITING_MESSAGE
        and current.last_sync_time is not None
        and current.last_error is None
        and _recorded_for(current, attempt)
    )
    if waited:
        run.set(ConditionState.true(USER_LIBRARY_SYNCED, SYNCED, synced_message(current)))
    return waited


def _recorded_for(current: UserLibraryStatus, attempt: Attempt) -> bool:
    """Whether the status records a sync of this revision, into this pod, with this
    configuration."""
    return (
        (current.observed_revision or "") == attempt.revision
        and current.pod_uid == attempt.pod_uid
        and current.config_hash == attempt.config
    )


def synced_message(synced: UserLibraryStatus) -> str:
    """The True condition's message for a sync: its files and bytes, and the keys skipped
    as unsafe, if any (a figure a Job did not report is ``?``)."""
    files = "?" if synced.files is None else synced.files
    size = "?" if synced.bytes is None else synced.bytes
    message = f"{files} files, {size} bytes"
    if synced.skipped:
        message += f"; {synced.skipped} unsafe keys skipped"
    return message


def refused_revision(p: Pass, current: UserLibraryStatus, attempt: Attempt) -> bool:
    """Whether ``attempt``'s revision is too long to sync: then the condition is False, a
    Warning says so once, and nothing is synced until the annotation changes (the failed
    attempt is recorded, as for any failure that retrying cannot fix)."""
    if len(attempt.revision) <= MAX_LIBRARY_REVISION:
        return False
    message = (
        f"the {ANNOTATION_LIBRARY_REVISION} annotation is {len(attempt.revision):,} "
        f"characters long, over the {MAX_LIBRARY_REVISION:,} a revision may have: nothing "
        "is synced until it changes"
    )
    p.run.status.user_library = current.model_copy(
        update={"failed_attempt": attempt.key, "last_error": message}
    )
    p.run.set(ConditionState.false(USER_LIBRARY_SYNCED, REVISION_TOO_LONG, message))
    p.event(f"Library{REVISION_TOO_LONG}", message, warning=True)
    return True


def told(p: Pass, message: str, reason: str) -> str:
    """A failed sync's ``message`` for the status and an event, or one that withholds it if
    it holds a piece of the sandbox's PAT, however cut up: it quotes what commands printed
    in the pod or over its library volume, file names the agent chose among it."""
    if p.issued is not None and holds_piece_of(message, p.issued.token.get_secret_value()):
        return f"the library sync failed ({reason}): {WITHHELD}"
    return message


def short_hash(text: str) -> str:
    """A 16-hex-digit SHA-256 prefix of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]

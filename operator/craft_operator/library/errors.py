"""Typed errors of the user-library sync.

Every error says whether retrying later can help (:attr:`LibrarySyncError.retryable`), so
the reconciler can back off and retry an outage, and report at once what only a change of
the sandbox can mend (a library over a cap, a pod that refuses the files).
Messages name the bucket, key or pod involved and never contain credentials.
"""

from __future__ import annotations


class LibrarySyncError(Exception):
    """Base of all user-library sync errors.

    ``reason`` is a CamelCase word for the ``UserLibrarySynced`` condition; ``retryable``
    says whether the same sync may succeed later without any change to the sandbox;
    ``lasting``, that it will not within seconds (a refusal someone must mend on S3's
    side): a sync Job fails at once on it rather than retry in place, and the operator
    retries later with its backoff.
    """

    reason: str = "SyncFailed"
    retryable: bool = False
    lasting: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable


class LibraryConfigError(LibrarySyncError):
    """The library cannot be located: no bucket in the spec or in CRAFT_S3_BUCKET."""

    reason = "LibraryMisconfigured"


class LibraryCapExceededError(LibrarySyncError):
    """The library is over a size cap; nothing was applied.

    ``reason`` is ``FileTooLarge`` or ``LibraryTooLarge``; ``limit`` and ``actual`` are bytes.
    """

    reason = "LibraryTooLarge"

    def __init__(
        self, message: str, *, reason: str, limit: int, actual: int, key: str | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.limit = limit
        self.actual = actual
        self.key = key


class S3Error(LibrarySyncError):
    """S3 refused or failed a request.

    Every S3 refusal is retried (with the library's backoff, up to 5 minutes apart): what
    it takes to mend one, a bucket policy, a role, a key or an object restored, happens on
    S3's side, where the operator sees no change that would bring it back otherwise.
    """

    reason = "S3Error"
    retryable = True
    lasting = True


class S3UnavailableError(S3Error):
    """S3 could not be reached, timed out, throttled us or failed on its side (5xx)."""

    reason = "S3Unavailable"
    retryable = True
    lasting = False


class S3AccessDeniedError(S3Error):
    """S3 rejected our credentials or the operator may not read the prefix."""

    reason = "S3AccessDenied"


class S3BucketNotFoundError(S3Error):
    """The configured bucket does not exist."""

    reason = "S3BucketNotFound"


class S3ObjectChangedError(S3Error):
    """An object changed or vanished between listing and download; the next sync sees it."""

    reason = "LibraryChangedDuringSync"
    retryable = True
    lasting = False


class S3ObjectArchivedError(S3Error):
    """An object S3 will not serve until it is restored (``InvalidObjectState``: an
    Intelligent-Tiering archive tier, or an archive class the listing did not name)."""

    reason = "S3ObjectArchived"

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class DestinationError(LibrarySyncError):
    """The destination (a pod or a local directory) could not be read or written."""

    reason = "DestinationFailed"


class ExecFailedError(DestinationError):
    """A command run in the sandbox pod failed; the message carries its stderr (trimmed)."""

    reason = "ExecFailed"
    retryable = True


class ExecCommandFailedError(ExecFailedError):
    """A command of the sync exited with an error in the sandbox pod: the pod's state (a
    full disk, files the agent changed) stopped it. Each retry may send the whole upload
    again, so the reconciler retries only a few times in a row for the same sync."""


class DestinationUnwritableError(DestinationError):
    """The library's state directory or manifest in the pod is not something the sync can
    write (the agent in the pod controls those files); found before the upload is applied.
    Retrying cannot help until the pod's files change: not retried."""

    reason = "DestinationUnwritable"


class ExecTimedOutError(ExecFailedError):
    """A command in the sandbox pod did not finish in time (a pod that does not read its
    input, or a stopped process); it was abandoned and the sync is retried later."""

    reason = "ExecTimedOut"
    retryable = True

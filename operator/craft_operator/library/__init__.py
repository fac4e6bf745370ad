"""The user library: planning and applying a sync of a user's S3 files into the sandbox.

The reconciler calls :func:`sync_user_library_exec` (Exec mode) or creates the Job that
:mod:`craft_operator.builders.library_job` builds (Job mode); the Job and the CLI call
:func:`sync_user_library_local`.
"""

from craft_operator.library.errors import (
    DestinationError,
    DestinationUnwritableError,
    ExecCommandFailedError,
    ExecFailedError,
    LibraryCapExceededError,
    LibraryConfigError,
    LibrarySyncError,
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3ObjectArchivedError,
    S3ObjectChangedError,
    S3UnavailableError,
)
from craft_operator.library.location import (
    LibraryLocation,
    S3CredentialsSecret,
    caps_from_settings,
    default_prefix,
    resolve_location,
)
from craft_operator.library.plan import CapViolation, SkippedKey, SyncCaps, SyncPlan, plan_sync
from craft_operator.library.s3 import ObjectStore, S3ObjectStore, make_s3_client, make_s3_store
from craft_operator.library.sync import (
    SyncResult,
    sync_library,
    sync_user_library_exec,
    sync_user_library_local,
)

__all__ = [
    "CapViolation",
    "DestinationError",
    "DestinationUnwritableError",
    "ExecCommandFailedError",
    "ExecFailedError",
    "LibraryCapExceededError",
    "LibraryConfigError",
    "LibraryLocation",
    "LibrarySyncError",
    "ObjectStore",
    "S3AccessDeniedError",
    "S3BucketNotFoundError",
    "S3CredentialsSecret",
    "S3Error",
    "S3ObjectArchivedError",
    "S3ObjectChangedError",
    "S3ObjectStore",
    "S3UnavailableError",
    "SkippedKey",
    "SyncCaps",
    "SyncPlan",
    "SyncResult",
    "caps_from_settings",
    "default_prefix",
    "make_s3_client",
    "make_s3_store",
    "plan_sync",
    "resolve_location",
    "sync_library",
    "sync_user_library_exec",
    "sync_user_library_local",
]

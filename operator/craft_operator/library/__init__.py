"""The user library: planning and applying a sync of a user's S3 files into the sandbox.

The reconciler calls :func:`sync_user_library_exec` (Exec mode) or creates the Job from
:func:`build_sync_job` (Job mode); the CLI calls :func:`sync_user_library_local`.
"""

from craft_operator.library.errors import (
    DestinationError,
    ExecFailedError,
    LibraryCapExceededError,
    LibraryConfigError,
    LibrarySyncError,
    S3AccessDeniedError,
    S3BucketNotFoundError,
    S3Error,
    S3ObjectChangedError,
    S3UnavailableError,
)
from craft_operator.library.job import (
    S3CredentialsSecret,
    build_library_pvc,
    build_sync_job,
    library_claim_name,
    sync_job_name,
)
from craft_operator.library.location import (
    LibraryLocation,
    caps_from_settings,
    default_prefix,
    resolve_location,
)
from craft_operator.library.plan import CapViolation, SkippedKey, SyncCaps, SyncPlan, plan_sync
from craft_operator.library.s3 import ObjectStore, S3ObjectStore, make_s3_client
from craft_operator.library.sync import (
    SyncResult,
    sync_library,
    sync_user_library_exec,
    sync_user_library_local,
)

__all__ = [
    "CapViolation",
    "DestinationError",
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
    "S3ObjectChangedError",
    "S3ObjectStore",
    "S3UnavailableError",
    "SkippedKey",
    "SyncCaps",
    "SyncPlan",
    "SyncResult",
    "build_library_pvc",
    "build_sync_job",
    "caps_from_settings",
    "default_prefix",
    "library_claim_name",
    "make_s3_client",
    "plan_sync",
    "resolve_location",
    "sync_job_name",
    "sync_library",
    "sync_user_library_exec",
    "sync_user_library_local",
]

"""Where a sandbox's user library lives in S3, and its caps, from spec and settings."""

from __future__ import annotations

from dataclasses import dataclass

from craft_operator.api.models import UserLibrary, UserRef
from craft_operator.config import Settings
from craft_operator.library.errors import LibraryConfigError
from craft_operator.library.paths import normalise_prefix
from craft_operator.library.plan import SyncCaps


@dataclass(frozen=True)
class LibraryLocation:
    """The bucket and prefix of one library, and how to reach S3."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    region: str | None = None


def default_prefix(tenant_id: str, user_id: str) -> str:
    """Onyx's historic layout: ``<tenant>/knowledge/<user_id>/user_library/``."""
    return f"{tenant_id}/knowledge/{user_id}/user_library/"


def resolve_location(library: UserLibrary, user: UserRef, settings: Settings) -> LibraryLocation:
    """The spec's bucket and prefix, else the settings' bucket and Onyx's default prefix."""
    bucket = library.bucket or settings.s3_bucket
    if not bucket:
        raise LibraryConfigError(
            "no S3 bucket for the user library: set spec.userLibrary.bucket or CRAFT_S3_BUCKET"
        )
    prefix = (
        library.prefix if library.prefix is not None else default_prefix(user.tenant_id, user.id)
    )
    return LibraryLocation(
        bucket=bucket,
        prefix=normalise_prefix(prefix),
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
    )


def caps_from_settings(settings: Settings) -> SyncCaps:
    """The caps configured by CRAFT_LIBRARY_MAX_FILE_BYTES, _TOTAL_BYTES, _MAX_FILES and
    _MANIFEST_MAX_BYTES."""
    return SyncCaps(
        max_file_bytes=settings.library_max_file_bytes,
        max_total_bytes=settings.library_max_total_bytes,
        max_files=settings.library_max_files,
        max_manifest_bytes=settings.library_manifest_max_bytes,
    )


@dataclass(frozen=True)
class S3CredentialsSecret:
    """The Secret (in the sandbox's namespace) with the S3 credentials for sync Jobs."""

    name: str
    access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 -- a key name
    session_token_key: str = "AWS_SESSION_TOKEN"  # noqa: S105 -- a key name, optional

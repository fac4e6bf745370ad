"""Where a sandbox's library lives: spec first, then settings and Onyx's default layout."""

from __future__ import annotations

import pytest

from craft_operator.api.models import UserLibrary, UserRef
from craft_operator.config import Settings
from craft_operator.library import LibraryConfigError, caps_from_settings, resolve_location
from craft_operator.library.plan import SyncCaps

pytestmark = [pytest.mark.unit]

USER = UserRef(id="3F2B8C1E-9D4A-4E6B-8F0A-1C2D3E4F5A6B", tenantId="acme")


def settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def test_the_default_prefix_is_onyx_s_layout_for_the_user() -> None:
    location = resolve_location(UserLibrary(), USER, settings(s3_bucket="onyx-files"))

    assert location.bucket == "onyx-files"
    assert location.prefix == "acme/knowledge/3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b/user_library/"


def test_the_spec_overrides_bucket_and_prefix_and_settings_give_the_endpoint() -> None:
    library = UserLibrary(bucket="my-bucket", prefix="custom/place/")
    configured = settings(s3_bucket="xyz", s3_endpoint_url="http://minio:9000", s3_region="eu-1")

    location = resolve_location(library, USER, configured)

    assert (location.bucket, location.prefix) == ("my-bucket", "custom/place/")
    assert (location.endpoint_url, location.region) == ("http://minio:9000", "eu-1")


def test_without_any_bucket_the_error_says_what_to_set() -> None:
    with pytest.raises(LibraryConfigError, match="CRAFT_S3_BUCKET") as raised:
        resolve_location(UserLibrary(), USER, settings(s3_bucket=None))
    assert not raised.value.retryable


def test_caps_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_LIBRARY_MAX_FILE_BYTES", "1000")
    monkeypatch.setenv("CRAFT_LIBRARY_MAX_TOTAL_BYTES", "5000")
    monkeypatch.setenv("CRAFT_LIBRARY_MAX_FILES", "20")
    monkeypatch.setenv("CRAFT_LIBRARY_MANIFEST_MAX_BYTES", "4096")

    assert caps_from_settings(Settings()) == SyncCaps(
        max_file_bytes=1000, max_total_bytes=5000, max_files=20, max_manifest_bytes=4096
    )
    monkeypatch.delenv("CRAFT_LIBRARY_MAX_FILES")
    monkeypatch.delenv("CRAFT_LIBRARY_MANIFEST_MAX_BYTES")
    monkeypatch.delenv("CRAFT_LIBRARY_MAX_FILE_BYTES")
    monkeypatch.delenv("CRAFT_LIBRARY_MAX_TOTAL_BYTES")
    assert caps_from_settings(Settings()) == SyncCaps(max_manifest_bytes=4 * 1024 * 1024)

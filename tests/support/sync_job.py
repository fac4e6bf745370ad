"""A sandbox's first library-sync Job, as the operator builds it, for the manifest tests."""

from __future__ import annotations

from typing import Any

from craft_operator.api.models import CraftSandbox
from craft_operator.builders.library_job import build_sync_job
from craft_operator.library import S3CredentialsSecret
from craft_operator.library.location import LibraryLocation
from craft_operator.library.plan import SyncCaps


def sample_sync_job(sandbox: CraftSandbox) -> dict[str, Any]:
    """The first library-sync Job of ``sandbox`` (bucket ``b``, prefix ``p/``)."""
    return build_sync_job(
        sandbox,
        image="craft-operator:dev",
        location=LibraryLocation(bucket="b", prefix="p/"),
        credentials=S3CredentialsSecret(name="s3"),
        sequence=1,
        caps=SyncCaps(),
    )

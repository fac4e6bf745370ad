"""A parsed CraftSandbox for the adapters' specifications."""

from __future__ import annotations

from typing import Any

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from tests.unit.reconciler.conftest import NAMESPACE

USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def make_sandbox(
    name: str = "alice",
    uid: str = "uid-alice",
    sources: list[dict[str, Any]] | None = None,
    lifetime: str = "100h",
    created: str | None = None,
) -> CraftSandbox:
    """A parsed CraftSandbox with a 100h credential lifetime (unless told), created at
    ``created`` (a creationTimestamp) if given."""
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1}
    if created is not None:
        metadata["creationTimestamp"] = created
    return parse_sandbox(
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": metadata,
            "spec": {
                "user": {"id": USER_ID},
                "credentials": {"lifetime": lifetime},
                "sources": sources or [],
            },
        }
    )

"""Validate what the operator writes against the real Kubernetes OpenAPI schemas.

The emulator calls these as validation hooks, so a write the real API server would refuse
(a typo'd field, a wrong type) fails the integration test that made it, with a 422.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kmock
import kubernetes_validate

from craft_operator.api import models

#: The Kubernetes version whose schemas the written objects are checked against.
KUBERNETES_VERSION = "1.33.0"


def kubernetes_schema_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the Kubernetes OpenAPI schema (strict: no unknown fields) says is wrong."""
    try:
        kubernetes_validate.validate(dict(obj), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(part) for part in exc.path)
        return [f"{path}: {exc.message}" if path else exc.message]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no Kubernetes schema for {obj.get('apiVersion')}/{obj.get('kind')}"]
    return []


def core_schema_validator(
    resource: kmock.resource, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[str]:
    """Emulator hook: built-in kinds against the Kubernetes schemas (CRs are checked apart)."""
    if resource.group == models.GROUP:
        return []
    return kubernetes_schema_problems(obj)

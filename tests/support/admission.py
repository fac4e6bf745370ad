"""Admission for the integration emulator: what the real API server would accept or refuse.

Built-in kinds are checked against the Kubernetes OpenAPI schemas, pods also against the
"restricted" Pod Security Standard (the namespace label a production cluster would set),
and CraftSandboxes are decoded (pruned, defaulted) and validated with the CRD's schema and
CEL rules by :mod:`tests.support.crd_validation`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kmock

from craft_operator.api import models
from tests.support.crd_validation import apply_defaults, craftsandbox_validator
from tests.support.peering_crd import PEERING_GROUP, peering_problems
from tests.support.policy import default_policy, is_policy, policy_validator
from tests.support.pools import is_pool, pool_validator
from tests.support.pss import restricted_violations
from tests.support.schemas import core_schema_validator


def admit(
    resource: kmock.resource, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[str]:
    """Emulator validation hook: every problem the API server would report."""
    if is_policy(resource):
        validator = policy_validator()
        result = validator.admit_create(obj) if old is None else validator.admit_update(old, obj)
        return result.messages
    if is_pool(resource):
        validator = pool_validator()
        result = validator.admit_create(obj) if old is None else validator.admit_update(old, obj)
        return result.messages
    if resource.group == models.GROUP:
        validator = craftsandbox_validator()
        result = validator.admit_create(obj) if old is None else validator.admit_update(old, obj)
        return result.messages
    if resource.group == PEERING_GROUP:
        return peering_problems(obj)
    problems = core_schema_validator(resource, obj, old)
    if resource.plural == "pods" and resource.group == "":
        problems += [f"violates PodSecurity restricted: {p}" for p in restricted_violations(obj)]
    return problems


def default_craftsandbox(resource: kmock.resource, obj: dict[str, Any]) -> dict[str, Any]:
    """Emulator mutation hook: apply the CRDs' defaults, as the API server does on write.

    Unknown fields are not pruned here: validation is strict, so a field the operator
    writes that the CRD does not declare fails the test instead of vanishing silently.
    """
    if is_policy(resource):
        return default_policy(copy.deepcopy(obj))
    if is_pool(resource):
        validator = pool_validator()
    elif resource.group == models.GROUP:
        validator = craftsandbox_validator()
    else:
        return obj
    defaulted = copy.deepcopy(obj)
    apply_defaults(defaulted, validator.schema)
    return defaulted

"""The CraftSandboxPolicy in tests: served by the emulator, admitted by its CRD, and written.

A test that names an image, server URL, bucket, ... other than the operator's defaults
writes a policy allowing it (:func:`allow`), exactly as a platform engineer would.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kmock

from craft_operator.api import models
from craft_operator.policy.models import POLICY_KIND, POLICY_NAME, POLICY_PLURAL, POLICY_SINGULAR
from tests.support.crd_validation import CrdValidator, apply_defaults
from tests.support.emulator import KubeEmulator

POLICIES = kmock.resource(models.GROUP, models.VERSION, POLICY_PLURAL)
POLICY_CRD = Path(__file__).resolve().parents[2] / "crds" / f"{POLICY_PLURAL}.{models.GROUP}.yaml"


@functools.lru_cache(maxsize=1)
def policy_validator() -> CrdValidator:
    """Admission of CraftSandboxPolicies by the committed CRD (schema and CEL rules)."""
    return CrdValidator.from_file(POLICY_CRD)


def is_policy(resource: kmock.resource) -> bool:
    """Whether ``resource`` is the CraftSandboxPolicy."""
    return resource.group == models.GROUP and resource.plural == POLICY_PLURAL


def default_policy(obj: dict[str, Any]) -> dict[str, Any]:
    """The CRD's defaults applied (every list empty), as the API server stores it."""
    apply_defaults(obj, policy_validator().schema)
    return obj


def declare_policy_resource(emulator: KubeEmulator) -> None:
    """Serve the CraftSandboxPolicy (cluster-scoped) in discovery, as its CRD defines it."""
    emulator.declare(
        POLICIES,
        kmock.ResourceInfo(
            kind=POLICY_KIND,
            singular=POLICY_SINGULAR,
            namespaced=False,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            categories={"craft"},
        ),
    )


def policy(**spec: Any) -> dict[str, Any]:
    """The CraftSandboxPolicy ``default`` with ``spec`` (camelCase keys)."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": POLICY_KIND,
        "metadata": {"name": POLICY_NAME},
        "spec": spec,
    }


def allow(emulator: KubeEmulator, **spec: Any) -> None:
    """Write the CraftSandboxPolicy ``default`` allowing ``spec`` (replacing any before)."""
    if emulator.find(POLICIES, None, POLICY_NAME) is not None:
        emulator.remove(POLICIES, None, POLICY_NAME)
    emulator.create(POLICIES, policy(**spec))

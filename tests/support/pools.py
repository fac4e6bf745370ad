"""The CraftSandboxPool in tests: served by the emulator, admitted by its CRD, and written."""

from __future__ import annotations

import functools
from typing import Any

import kmock

from craft_operator.api import models
from craft_operator.api.pool import POOL_KIND, POOL_PLURAL, POOL_SHORT_NAMES, POOL_SINGULAR
from craft_operator.api.pool_crd import build_pool_crd
from tests.support.crd_validation import CrdValidator
from tests.support.emulator import KubeEmulator

POOLS = kmock.resource(models.GROUP, models.VERSION, POOL_PLURAL)


@functools.lru_cache(maxsize=1)
def pool_validator() -> CrdValidator:
    """Admission of CraftSandboxPools by the generated CRD (schema and CEL rules)."""
    return CrdValidator(build_pool_crd())


def is_pool(resource: kmock.resource) -> bool:
    """Whether ``resource`` is the CraftSandboxPool."""
    return resource.group == models.GROUP and resource.plural == POOL_PLURAL


def declare_pool_resource(emulator: KubeEmulator) -> None:
    """Serve the CraftSandboxPool in discovery, as its CRD defines it."""
    emulator.declare(
        POOLS,
        kmock.ResourceInfo(
            kind=POOL_KIND,
            singular=POOL_SINGULAR,
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            shortnames=set(POOL_SHORT_NAMES),
            categories={"craft"},
            subresources={"status", "scale"},
        ),
    )


def pool(name: str = "warm", *, replicas: int = 3, **spec: Any) -> dict[str, Any]:
    """A CraftSandboxPool manifest with ``spec`` (camelCase keys)."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": POOL_KIND,
        "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec},
    }

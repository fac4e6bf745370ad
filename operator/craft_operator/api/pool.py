"""The CraftSandboxPool API: a number of warm sandbox pods waiting to be claimed.

A pool keeps ``replicas`` pods running the sandbox image with no user, no token, no skill
and no library, under the same security context and network policy as a sandbox pod. A
CraftSandbox whose pod settings match the pool's claims one of them instead of starting a
pod cold. The pod settings are the CraftSandbox spec's own fields (same types, same rules),
so that a pool cannot ask for a pod that no sandbox could match; unset ones default from
the operator's settings exactly as a sandbox's do.

The CRD (``crds/craftsandboxpools.craft.onyx.app.yaml``) is generated from these models by
:mod:`craft_operator.api.pool_crd`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo

from craft_operator.api.base import ApiModel
from craft_operator.api.constants import GROUP
from craft_operator.api.models import ObjectMeta
from craft_operator.api.parse import describe_validation_error
from craft_operator.api.spec import (
    CraftSandboxSpec,
    NodeSelector,
    PodSettingsChecks,
    Resources,
    Toleration,
)
from craft_operator.api.status import Condition, StatusModel

POOL_KIND = "CraftSandboxPool"
POOL_PLURAL = "craftsandboxpools"
POOL_SINGULAR = "craftsandboxpool"
POOL_SHORT_NAMES = ["csbpool"]
#: The most pods one pool may keep warm.
MAX_REPLICAS = 500
#: A pool's name is a label value on its pods: a DNS label of at most 63 characters.
MAX_POOL_NAME_LENGTH = 63

#: On a pool's unclaimed pods: the pool they belong to. A claim removes it.
LABEL_POOL = f"{GROUP}/pool"
#: On a pool's pods: the hash of the pod template they were made from.
LABEL_POOL_TEMPLATE_HASH = f"{GROUP}/pool-template-hash"
#: On a claimed pod: the pool it was claimed from (it belongs to its sandbox now).
LABEL_CLAIMED_FROM = f"{GROUP}/claimed-from"

#: The pool's conditions.
POOL_READY = "Ready"
EGRESS_RESTRICTED = "EgressRestricted"


def _sandbox_field(name: str, description: str) -> Any:
    """The CraftSandbox spec's own field ``name`` (its constraints and CEL rules), described
    for a pool. Typed ``Any`` because it is a pydantic ``FieldInfo`` used as a default."""
    field: FieldInfo = copy.copy(CraftSandboxSpec.model_fields[name])
    field.description = description
    return field


_MATCH = " A CraftSandbox claims the pool's pods only if its own value is the same."


class CraftSandboxPoolSpec(PodSettingsChecks):
    """The desired state of a pool of warm sandbox pods."""

    replicas: int = Field(
        default=1,
        description=(
            f"How many unclaimed pods the pool keeps (0 to {MAX_REPLICAS}; 1 if not given, "
            "so that a manifest may leave it to kubectl scale or a HorizontalPodAutoscaler). "
            "A claimed pod leaves the pool and is replaced."
        ),
        ge=0,
        le=MAX_REPLICAS,
    )
    image: str | None = _sandbox_field(
        "image",
        "Sandbox container image; defaults to the operator's CRAFT_SANDBOX_IMAGE." + _MATCH,
    )
    resources: Resources | None = _sandbox_field(
        "resources",
        "Sandbox container resources; each request and limit set here replaces that key of "
        "the operator's CRAFT_SANDBOX_RESOURCES. A request is at most its limit (equal to "
        "it for hugepages and extended resources such as nvidia.com/gpu)." + _MATCH,
    )
    runtime_class_name: str | None = _sandbox_field(
        "runtime_class_name", "RuntimeClass of the pool's pods (e.g. gvisor or kata)." + _MATCH
    )
    node_selector: NodeSelector | None = _sandbox_field(
        "node_selector", "Node labels the pool's pods must be scheduled on." + _MATCH
    )
    tolerations: list[Toleration] | None = _sandbox_field(
        "tolerations", "Tolerations of the pool's pods." + _MATCH
    )
    priority_class_name: str | None = _sandbox_field(
        "priority_class_name", "PriorityClass of the pool's pods." + _MATCH
    )


class CraftSandboxPoolStatus(StatusModel):
    """The observed state of a pool, written only by the operator."""

    replicas: int | None = Field(
        default=None,
        description="Unclaimed pods of the pool, of any template, ready or not.",
    )
    ready: int | None = Field(
        default=None,
        description="Unclaimed pods of the current template that are running and Ready.",
    )
    creating: int | None = Field(default=None, description="Unclaimed pods that are not Ready yet.")
    claimed: int | None = Field(
        default=None,
        description=(
            "Pods claimed from a pool of this name that still exist (they belong to "
            "sandboxes; a pool deleted and made again counts those of the one before)."
        ),
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation the operator last acted on."
    )
    template_hash: str | None = Field(
        default=None,
        description=(
            "Hash of the current pod template; its pods carry it in the "
            "craft.onyx.app/pool-template-hash label."
        ),
    )
    selector: str | None = Field(
        default=None,
        description=(
            "Label selector of the pool's unclaimed pods (the scale subresource's, which a "
            "HorizontalPodAutoscaler requires)."
        ),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Ready (the pool holds its replicas, all of the current template) and "
            "EgressRestricted (a NetworkPolicy restricts its pods' egress)."
        ),
    )


class CraftSandboxPool(ApiModel):
    """A pool of warm sandbox pods that CraftSandboxes claim to be Ready at once."""

    api_version: Literal["craft.onyx.app/v1alpha1"] = Field(
        default="craft.onyx.app/v1alpha1", description="craft.onyx.app/v1alpha1"
    )
    kind: Literal["CraftSandboxPool"] = Field(
        default="CraftSandboxPool", description="CraftSandboxPool"
    )
    metadata: ObjectMeta
    spec: CraftSandboxPoolSpec
    status: CraftSandboxPoolStatus = Field(default_factory=CraftSandboxPoolStatus)


class InvalidPoolError(ValueError):
    """The object passed admission but does not fit the model (e.g. an older CRD)."""


def parse_pool(body: Mapping[str, Any]) -> CraftSandboxPool:
    """Validate a CraftSandboxPool body; raise :class:`InvalidPoolError` with a readable
    message. An unreadable status is dropped (the operator writes it anew)."""
    data = dict(body)
    try:
        return CraftSandboxPool.model_validate(data)
    except ValidationError as exc:
        if not any(error["loc"] and error["loc"][0] == "status" for error in exc.errors()):
            raise InvalidPoolError(describe_validation_error(exc)) from None
    data.pop("status", None)
    try:
        return CraftSandboxPool.model_validate(data)
    except ValidationError as exc:
        raise InvalidPoolError(describe_validation_error(exc)) from None
